// The reductions' loop as a kernel (backends/common/reduce.hpp).
#include "backends/common/reduce.hpp"

#include "backends/common/grad.hpp"
#include "operators/params.hpp"

namespace mosaic {
namespace {

class ReduceLoopKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    op_ = *reduce_op_of(ctx.node->op_type);
    MOSAIC_ASSIGN_OR_RETURN(p_, reduce_params(ctx));
    dtype_ = ctx.inputs[0].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dtype_ == DType::kF32) reduce_forward(reduce_info(op_), p_, src[0]->f32(), dst[0]->f32());
    else reduce_forward(reduce_info(op_), p_, src[0]->i64(), dst[0]->i64());
    return Status::ok();
  }
  bool has_backward() const override { return dtype_ == DType::kF32; }
  Status backward(const BackwardArgs& a) override { return reduce_kernel_backward(op_, p_, a); }

 private:
  ReduceOp op_ = ReduceOp::kSum;
  ReduceParams p_;
  DType dtype_ = DType::kF32;
};

/// ArgMax / ArgMin along one axis: the index of the first (or, with select_last_index, the
/// last) extreme element, as int64.
class ArgExtremeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Shape& x = ctx.inputs[0].shape;
    MOSAIC_ASSIGN_OR_RETURN(const int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0),
                                                               static_cast<int64_t>(x.size()), *ctx.node));
    for (int64_t a = 0; a < static_cast<int64_t>(x.size()); ++a)
      (a < axis ? outer_ : a > axis ? inner_ : n_) *= x[a];
    max_ = ctx.node->op_type == "ArgMax";
    last_ = ctx.node->attr_int("select_last_index", 0) != 0;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    int64_t* y = dst[0]->i64();
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        const float* row = x + o * n_ * inner_ + i;
        int64_t best = 0;
        for (int64_t k = 1; k < n_; ++k) {
          const float v = row[k * inner_], b = row[best * inner_];
          const bool better = max_ ? (v > b || (last_ && v == b)) : (v < b || (last_ && v == b));
          if (better) best = k;
        }
        y[o * inner_ + i] = best;
      }
    return Status::ok();
  }

 private:
  int64_t outer_ = 1, n_ = 1, inner_ = 1;
  bool max_ = true, last_ = false;
};

}  // namespace

Status reduce_kernel_backward(ReduceOp op, const ReduceParams& p, const BackwardArgs& a) {
  if (a.diff_src.size() > 1) zeroed_grad(a, 1);
  if (!a.diff_src[0]) return Status::ok();
  reduce_backward(reduce_info(op), p, a.src[0]->f32(), a.dst[0]->f32(), a.diff_dst[0]->f32(), a.diff_src[0]->f32());
  return Status::ok();
}

void add_arg_extreme_kernels(BackendRegistration& r) {
  for (const char* op : {"ArgMax", "ArgMin"}) r.kernel(op, make_factory<ArgExtremeKernel>());
}

void add_reduce_loop_kernels(BackendRegistration& r, SupportCheck supports) {
  for (const auto& op : kReduceOps) r.kernel(op.name, make_factory<ReduceLoopKernel>(), {LayoutUse::kNone, supports});
}

}  // namespace mosaic
