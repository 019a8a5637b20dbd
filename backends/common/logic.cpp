// Comparisons and logical ops (rows of kCompareOps in operators/eltwise.hpp), Not, Where
// (backward: the gradient goes to the chosen operand) and Expand (a broadcast copy; backward
// sums over the broadcast axes), one loop over the broadcast indices each, for any dtype.
#include "backends/common/logic.hpp"

#include <array>
#include <cstring>

#include "backends/common/broadcast.hpp"
#include "backends/common/grad.hpp"
#include "operators/eltwise.hpp"

namespace mosaic {
namespace {

class CompareKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    op_ = *compare_op_of(ctx.node->op_type);
    shapes_ = {ctx.inputs[0].shape, ctx.inputs[1].shape};
    out_ = ctx.outputs[0].shape;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    uint8_t* y = dst[0]->u8();
    const DType t = src[0]->dtype();
    if (t == DType::kI64) {  // exactly: a double rounds integers past 2^53
      const auto fi = compare_info(op_).fi;
      const int64_t* a = src[0]->i64();
      const int64_t* b = src[1]->i64();
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) { y[i] = fi(a[o[0]], b[o[1]]); });
      return Status::ok();
    }
    if (dtype_is_integer(t)) {  // every other integer as int64; uint64 with its top bit flipped keeps its order
      const auto fi = compare_info(op_).fi;
      const uint64_t flip = t == DType::kU64 ? uint64_t{1} << 63 : 0;
      auto at = [&](const Tensor& x, int64_t i) { return static_cast<int64_t>(static_cast<uint64_t>(x.get_i64(i)) ^ flip); };
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) {
        y[i] = fi(at(*src[0], o[0]), at(*src[1], o[1]));
      });
      return Status::ok();
    }
    const auto f = compare_info(op_).f;
    if (t == DType::kF32) {
      const float* a = src[0]->f32();
      const float* b = src[1]->f32();
      each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) { y[i] = f(a[o[0]], b[o[1]]); });
      return Status::ok();
    }
    // the other floats (float16 and bfloat16 read exactly as double) and bool
    each_broadcast<2>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 2>& o) {
      y[i] = f(src[0]->get(o[0]), src[1]->get(o[1]));
    });
    return Status::ok();
  }

 private:
  CompareOp op_ = CompareOp::kEqual;
  std::array<Shape, 2> shapes_;
  Shape out_;
};

class NotKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    for (int64_t i = 0; i < src[0]->numel(); ++i) dst[0]->u8()[i] = !src[0]->u8()[i];
    return Status::ok();
  }
};

/// y = cond ? a : b, broadcast over the three.
class WhereKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    shapes_ = {ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.inputs[2].shape};
    out_ = ctx.outputs[0].shape;
    dtype_ = ctx.outputs[0].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    switch (dtype_size(dtype_)) {  // the elements as words of their size
      case 1: select<uint8_t>(src, dst); break;
      case 2: select<uint16_t>(src, dst); break;
      case 4: select<uint32_t>(src, dst); break;
      default: select<uint64_t>(src, dst); break;
    }
    return Status::ok();
  }
  bool has_backward() const override { return dtype_ == DType::kF32; }
  bool backward_reads_input(size_t i) const override { return i == 0; }
  bool backward_reads_output(size_t) const override { return false; }
  /// da = dy where cond, db = dy where not, each summed over the axes it was broadcast along.
  Status backward(const BackwardArgs& g) override {
    float* da = zeroed_grad(g, 1);
    float* db = zeroed_grad(g, 2);
    const uint8_t* c = g.src[0]->u8();
    const float* dy = g.diff_dst[0]->f32();
    each_broadcast<3>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 3>& o) {
      if (c[o[0]]) {
        if (da) da[o[1]] += dy[i];
      } else if (db) {
        db[o[2]] += dy[i];
      }
    });
    return Status::ok();
  }

 private:
  template <class W>
  void select(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) const {
    static_assert(sizeof(W) <= 8);
    const uint8_t* c = src[0]->u8();
    const auto* a = static_cast<const W*>(src[1]->data());
    const auto* b = static_cast<const W*>(src[2]->data());
    auto* y = static_cast<W*>(dst[0]->data());
    each_broadcast<3>(out_, shapes_, [&](int64_t i, const std::array<int64_t, 3>& o) { y[i] = c[o[0]] ? a[o[1]] : b[o[2]]; });
  }
  std::array<Shape, 3> shapes_;
  Shape out_;
  DType dtype_ = DType::kF32;
};

class ExpandKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    in_ = {ctx.inputs[0].shape};
    out_ = ctx.outputs[0].shape;
    dtype_ = ctx.inputs[0].dtype;
    // The trailing axes Expand leaves as they are are one contiguous block in both: the copy
    // walks the outer axes and moves a block at a time (a decoder's grouped-query key and value
    // heads, [b, kv, 1, L, d] -> [b, kv, g, L, d], copy L x d floats at once).
    Shape in = in_[0];
    in.insert(in.begin(), out_.size() - in.size(), 1);
    size_t outer = out_.size();
    block_ = 1;
    while (outer > 0 && in[outer - 1] == out_[outer - 1]) block_ *= out_[--outer];
    outer_in_ = {Shape(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(outer))};
    outer_out_ = Shape(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(outer));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* x = static_cast<const uint8_t*>(src[0]->data());
    auto* y = static_cast<uint8_t*>(dst[0]->data());
    if (block_ == 0) return Status::ok();
    const size_t row = static_cast<size_t>(block_) * dtype_size(dtype_);
    auto copy = [&](auto word) {  // rows of one element moved as a word of their size
      using W = decltype(word);
      each_broadcast<1>(outer_out_, outer_in_, [&](int64_t i, const std::array<int64_t, 1>& o) {
        W v;
        std::memcpy(&v, x + o[0] * sizeof(W), sizeof(W));
        std::memcpy(y + i * sizeof(W), &v, sizeof(W));
      });
    };
    switch (row) {
      case 1: copy(uint8_t{}); break;
      case 2: copy(uint16_t{}); break;
      case 4: copy(uint32_t{}); break;
      case 8: copy(uint64_t{}); break;
      default:
        each_broadcast<1>(outer_out_, outer_in_, [&](int64_t i, const std::array<int64_t, 1>& o) {
          std::memcpy(y + static_cast<size_t>(i) * row, x + static_cast<size_t>(o[0]) * row, row);
        });
    }
    return Status::ok();
  }
  bool has_backward() const override { return dtype_ == DType::kF32; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    float* dx = zeroed_grad(a, 0);  // the shape (input 1) has no gradient
    if (!dx) return Status::ok();
    const float* dy = a.diff_dst[0]->f32();
    each_broadcast<1>(out_, in_, [&](int64_t i, const std::array<int64_t, 1>& o) { dx[o[0]] += dy[i]; });
    return Status::ok();
  }

 private:
  std::array<Shape, 1> in_;
  Shape out_;
  DType dtype_ = DType::kF32;
  int64_t block_ = 1;                ///< elements of the trailing axes Expand keeps
  std::array<Shape, 1> outer_in_;    ///< the input's other axes (at the output's rank)
  Shape outer_out_;                  ///< the output's other axes
};

}  // namespace

void add_logic_kernels(BackendRegistration& r) {
  // Every element type: Expand and Where move bytes, the comparisons read each type exactly.
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  r.kernel("Expand", make_factory<ExpandKernel>(), any);
  for (const auto& c : kCompareOps) r.kernel(c.name, make_factory<CompareKernel>(), any);
  r.kernel("Not", make_factory<NotKernel>());
  r.kernel("Where", make_factory<WhereKernel>(), any);
}

}  // namespace mosaic
