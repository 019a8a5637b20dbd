// torch: the reductions of operators/reduce.hpp with the ATen functions PyTorch's eager mode
// calls (at::sum, at::mean, at::amax, at::amin, at::prod, at::norm, at::logsumexp; ReduceLogSum
// as log(sum), as torch.log(torch.sum(x)) computes it). Backward is autograd's rule for each,
// written with ATen calls: the gradient broadcast back, times the local derivative (amax and
// amin split it evenly between ties, as their autograd formulas do).
#include <optional>

#include "backends/torch/torch_kernel.hpp"
#include "operators/reduce.hpp"

namespace mosaic::torch_backend {
namespace {

class ReduceKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx, 1));
    // ATen refuses a maximum or minimum over nothing (amax: "Expected reduction dim to have
    // non-zero size"); naive gives ONNX's answer.
    if (ctx.inputs[0].numel() == 0)
      return Status::unsupported(label_ + ": ATen reduces no empty input (" + shape_str(ctx.inputs[0].shape) + ")");
    op_ = *reduce_op_of(ctx.node->op_type);
    MOSAIC_ASSIGN_OR_RETURN(p_, reduce_params(ctx));
    return Status::ok();
  }
  bool has_backward() const override { return true; }

 private:
  /// x reduced to the kept shape (reduced axes as 1).
  at::Tensor reduce(const at::Tensor& x) const {
    const at::IntArrayRef d(p_.axes);
    switch (op_) {
      case ReduceOp::kSum: return at::sum(x, d, true);
      case ReduceOp::kMean: return at::mean(x, d, true);
      case ReduceOp::kMax: return at::amax(x, d, true);
      case ReduceOp::kMin: return at::amin(x, d, true);
      case ReduceOp::kProd: {
        at::Tensor y = x;
        for (int64_t a : p_.axes) y = at::prod(y, a, true);  // at::prod reduces one axis at a time
        return y;
      }
      case ReduceOp::kL1: return at::norm(x, 1, d, true);
      case ReduceOp::kL2: return at::norm(x, 2, d, true);
      case ReduceOp::kLogSum: return at::log(at::sum(x, d, true));
      case ReduceOp::kLogSumExp: return at::logsumexp(x, d, true);
      case ReduceOp::kSumSquare: return at::sum(x * x, d, true);
      default: return x;
    }
  }
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const at::Tensor x = view(src[0]);
    write(p_.axes.empty() ? x.clone() : reduce(x), dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    const at::Tensor x = view(a.src[0]);
    const at::Tensor y = view(a.dst[0]).view(at::IntArrayRef(p_.kept));
    const at::Tensor dy = view(a.diff_dst[0]).view(at::IntArrayRef(p_.kept));
    if (p_.axes.empty()) {
      write(dy.expand_as(x), a.diff_src[0]);
      return;
    }
    const double n = p_.count;
    at::Tensor g;
    switch (op_) {
      case ReduceOp::kSum: g = dy.expand_as(x); break;
      case ReduceOp::kMean: g = (dy / n).expand_as(x); break;
      case ReduceOp::kMax:
      case ReduceOp::kMin: {
        const at::Tensor hit = (x == y).to(at::kFloat);
        g = hit * dy / hit.sum(at::IntArrayRef(p_.axes), true);
        break;
      }
      case ReduceOp::kProd: {  // autograd's prod_backward without zeros: y / x
        g = at::where(x != 0, dy * y / x, at::zeros_like(x));
        const at::Tensor zeros = (x == 0).sum(at::IntArrayRef(p_.axes), true);
        if (zeros.gt(0).any().item<bool>()) {
          // Where an element is zero its gradient is the product of the others.
          at::Tensor others = at::where(x == 0, at::ones_like(x), x);
          for (int64_t d : p_.axes) others = at::prod(others, d, true);
          g = at::where(x == 0, at::where(zeros == 1, dy * others, at::zeros_like(dy)).expand_as(x),
                        at::where(zeros > 0, at::zeros_like(g), g));
        }
        break;
      }
      case ReduceOp::kL1: g = dy * x.sgn(); break;
      case ReduceOp::kL2: g = at::where(y == 0, at::zeros_like(x), dy * x / y); break;
      case ReduceOp::kLogSum: g = (dy * at::exp(-y)).expand_as(x); break;
      case ReduceOp::kLogSumExp: g = dy * at::exp(x - y); break;
      case ReduceOp::kSumSquare: g = 2 * dy * x; break;
      default: g = dy.expand_as(x); break;
    }
    write(g.contiguous(), a.diff_src[0]);
  }

  ReduceOp op_ = ReduceOp::kSum;
  ReduceParams p_;
};

}  // namespace

void add_reduce_kernels(BackendRegistration& r) {
  for (const auto& op : kReduceOps) r.kernel(op.name, make_factory<ReduceKernel>());
}

}  // namespace mosaic::torch_backend
