#include "backends/common/pointwise.hpp"

#include <array>

#include "backends/common/broadcast.hpp"
#include "operators/pointwise.hpp"

namespace mosaic {
namespace {

class PointwiseKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    op_ = *pointwise_op_of(ctx.node->op_type);
    args_.detect_positive = ctx.node->attr_int("detect_positive", 1) != 0;
    args_.detect_negative = ctx.node->attr_int("detect_negative", 1) != 0;
    args_.fmod = ctx.node->attr_int("fmod", 0) != 0;
    const std::string direction = ctx.node->attr_string("direction", "");
    if (op_ == PointwiseOp::kBitShift && direction != "LEFT" && direction != "RIGHT")
      return Status::invalid(ctx.node->label() + ": direction must be LEFT or RIGHT, got '" + direction + "'");
    args_.shift_left = direction == "LEFT";
    args_.unsigned64 = ctx.inputs[0].dtype == DType::kU64;
    args_.bias = ctx.node->attr_float("bias", 0.f);
    args_.lambd = ctx.node->attr_float("lambd", 0.5f);
    args_.alpha = ctx.node->attr_float("alpha", 1.f);
    dtype_ = ctx.inputs[0].dtype;
    out_ = ctx.outputs[0].shape;
    shapes_ = {ctx.inputs[0].shape, ctx.inputs.size() > 1 ? ctx.inputs[1].shape : ctx.inputs[0].shape};
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const Tensor& a = *src[0];
    const Tensor& b = src.size() > 1 ? *src[1] : *src[0];
    Tensor& y = *dst[0];
    const bool to_bool = pointwise_info(op_).to_bool;
    if (dtype_ == DType::kI64 || dtype_ == DType::kU64) {  // uint64: only the bit ops (supported_types)
      const int64_t *pa = a.i64(), *pb = b.i64();
      int64_t* py = y.i64();
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) {
        py[i] = pointwise_forward(op_, pa[o[0]], pb[o[1]], args_);
      });
      return Status::ok();
    }
    const float *pa = a.f32(), *pb = b.f32();
    if (op_ == PointwiseOp::kIsNaN) {  // the common case (attention masks), as a loop that vectorises
      uint8_t* py = y.u8();
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) { py[i] = pa[o[0]] != pa[o[0]]; });
    } else if (to_bool) {
      uint8_t* py = y.u8();
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) {
        py[i] = pointwise_forward(op_, pa[o[0]], pb[o[1]], args_) != 0.f;
      });
    } else {
      float* py = y.f32();
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) {
        py[i] = pointwise_forward(op_, pa[o[0]], pb[o[1]], args_);
      });
    }
    return Status::ok();
  }

 private:
  PointwiseOp op_ = PointwiseOp::kFloor;
  PointwiseArgs args_;
  DType dtype_ = DType::kF32;
  Shape out_;
  std::array<Shape, 2> shapes_;
};

}  // namespace

void add_pointwise_kernels(BackendRegistration& r) {
  for (const PointwiseOpInfo& p : kPointwiseOps) {
    // The bit ops take uint64 as its 64 bits; the others compute on int64 values.
    const DTypeSet types = p.bits ? kBaseDTypes | dtype_bit(DType::kU64) : kBaseDTypes;
    r.kernel(p.name, make_factory<PointwiseKernel>(), {LayoutUse::kNone, nullptr, types});
  }
}

}  // namespace mosaic
