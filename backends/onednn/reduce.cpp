// The oneDNN backend's reductions: the reduction primitive (sum, mean, max, min, product and
// the p-norms) forward; its backward is the shared rule (backends/common/reduce.hpp), since
// oneDNN has no reduction backward. ReduceLogSum and ReduceLogSumExp have no oneDNN
// algorithm: no kernel here (the planner places them elsewhere).
#include <optional>

#include "backends/common/reduce.hpp"
#include "backends/common/support.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

struct ReductionAlgorithm {
  algorithm alg;
  float p;
};

std::optional<ReductionAlgorithm> reduction_algorithm(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ReductionAlgorithm{algorithm::reduction_sum, 0};
    case ReduceOp::kMean: return ReductionAlgorithm{algorithm::reduction_mean, 0};
    case ReduceOp::kMax: return ReductionAlgorithm{algorithm::reduction_max, 0};
    case ReduceOp::kMin: return ReductionAlgorithm{algorithm::reduction_min, 0};
    case ReduceOp::kProd: return ReductionAlgorithm{algorithm::reduction_mul, 0};
    case ReduceOp::kL1: return ReductionAlgorithm{algorithm::reduction_norm_lp_sum, 1};
    case ReduceOp::kL2: return ReductionAlgorithm{algorithm::reduction_norm_lp_sum, 2};
    case ReduceOp::kSumSquare: return ReductionAlgorithm{algorithm::reduction_norm_lp_power_p_sum, 2};
    default: return std::nullopt;
  }
}

Status reduce_supported(const KernelContext& ctx) {
  MOSAIC_RETURN_IF_ERROR(float32_data(ctx));
  if (!reduction_algorithm(*reduce_op_of(ctx.node->op_type)))
    return Status::unsupported(ctx.node->label() + ": oneDNN has no reduction algorithm for " + ctx.node->op_type);
  return Status::ok();
}

class ReduceKernel final : public SrcDstPrimitive {
 public:
  Status init(const KernelContext& ctx) {
    op_ = *reduce_op_of(ctx.node->op_type);
    MOSAIC_ASSIGN_OR_RETURN(p_, reduce_params(ctx));
    const auto alg = reduction_algorithm(op_);
    if (!alg) return Status::unsupported(ctx.node->label() + ": oneDNN has no reduction algorithm for " + ctx.node->op_type);
    if (p_.axes.empty())  // noop_with_empty_axes: oneDNN refuses a reduction that reduces nothing
      return Status::unsupported(ctx.node->label() + ": no axis to reduce (noop_with_empty_axes), a copy");
    // oneDNN 2.6 also refuses ("invalid arguments") a reduction whose output has the input's
    // shape: every reduced axis of size 1, as timm's global pooling over a 1x1 map exports.
    // That one runs the shared loop (an element-wise pass).
    if (p_.kept == p_.in) {
      shared_loop_ = true;
      return Status::ok();
    }
    // oneDNN 2.6's max and min start from the lowest and highest finite floats: a row of
    // -inf (a fully masked attention row) gives -3.4e38, not -inf, and the model's
    // "all masked" test fails. Those run the shared loop too.
    if (op_ == ReduceOp::kMax || op_ == ReduceOp::kMin) {
      shared_loop_ = true;
      return Status::ok();
    }
    return guarded(*ctx.node, [&]() -> Status {
      // The output as the input's rank with the reduced axes kept as 1: the same bytes as
      // the node's output, with or without keepdims.
      const memory::desc src = plain(p_.in), dst = plain(p_.kept);
      dnnl::reduction::desc d(alg->alg, src, dst, alg->p, 0.f);
      set(dnnl::reduction(dnnl::reduction::primitive_desc(d, engine())), src, dst);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (!shared_loop_) return SrcDstPrimitive::forward(src, dst);
    reduce_forward(reduce_info(op_), p_, src[0]->f32(), dst[0]->f32());
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  /// oneDNN has no reduction backward: the shared rule.
  Status backward(const BackwardArgs& a) override { return reduce_kernel_backward(op_, p_, a); }

 private:
  ReduceOp op_ = ReduceOp::kSum;
  ReduceParams p_;
  bool shared_loop_ = false;
};

}  // namespace

void add_reduce_kernels(BackendRegistration& r) {
  for (const auto& op : kReduceOps)
    if (reduction_algorithm(op.op)) r.kernel(op.name, make_factory<ReduceKernel>(), {LayoutUse::kNone, reduce_supported});
}

}  // namespace mosaic::onednn_impl
