// torch: LayerNormalization with at::native_layer_norm and, in training, the backward
// PyTorch's autograd calls for it (at::native_layer_norm_backward) with the forward pass's
// mean and reciprocal standard deviation.
#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {
namespace {

class LayerNormKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, layer_norm_params(ctx));
    if (ctx.has_output(1) || ctx.has_output(2))
      return Status::unsupported(label_ + ": LayerNormalization's Mean and InvStdDev outputs");
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  at::Tensor rows(const Tensor* t) const { return view(t).view({p_.outer, p_.inner}); }
  /// Scale and B as one value per normalised element (their ONNX shape is X's trailing axes).
  at::Tensor flat(const Tensor* t) const { return view(t).view({p_.inner}); }
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const at::Tensor bias = p_.has_bias ? flat(src[2]) : at::Tensor();
    auto [y, mean, rstd] = at::native_layer_norm(rows(src[0]), {p_.inner}, flat(src[1]), bias, p_.epsilon);
    write(y, dst[0]);
    if (training_) {
      mean_ = mean;
      rstd_ = rstd;
    }
  }
  void run_backward(const BackwardArgs& a) override {
    const at::Tensor bias = p_.has_bias ? flat(a.src[2]) : at::Tensor();
    auto grad = [&](size_t i) { return i < a.diff_src.size() && a.diff_src[i] != nullptr; };
    auto [dx, dscale, dbias] = at::native_layer_norm_backward(rows(a.diff_dst[0]), rows(a.src[0]), {p_.inner}, mean_,
                                                              rstd_, flat(a.src[1]), bias,
                                                              {grad(0), grad(1), grad(2) && p_.has_bias});
    if (grad(0)) write(dx, a.diff_src[0]);
    if (grad(1)) write(dscale, a.diff_src[1]);
    if (grad(2) && p_.has_bias) write(dbias, a.diff_src[2]);
  }

  LayerNormParams p_;
  at::Tensor mean_, rstd_;  ///< the last training forward's statistics
};

}  // namespace

void add_layer_norm_kernels(BackendRegistration& r) { r.kernel("LayerNormalization", make_factory<LayerNormKernel>()); }

}  // namespace mosaic::torch_backend
