// LayerNormalization's and RMSNormalization's loops as kernels (backends/common/layer_norm.hpp).
#include "backends/common/layer_norm.hpp"

#include "backends/common/grad.hpp"

namespace mosaic {
namespace {

class LayerNormLoopKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, layer_norm_params(ctx));
    if (ctx.training && (ctx.has_output(1) || ctx.has_output(2)))
      return Status::unsupported(ctx.node->label() + ": training through LayerNormalization's Mean or InvStdDev output");
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    layer_norm_forward(p_, src[0]->f32(), src[1]->f32(), p_.has_bias ? src[2]->f32() : nullptr, dst[0]->f32(),
                       dst.size() > 1 && dst[1] ? dst[1]->f32() : nullptr,
                       dst.size() > 2 && dst[2] ? dst[2]->f32() : nullptr);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    auto grad = [&](size_t i) { return i < a.diff_src.size() && a.diff_src[i] ? a.diff_src[i]->f32() : nullptr; };
    layer_norm_backward(p_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(), grad(0), grad(1), grad(2));
    return Status::ok();
  }

 private:
  LayerNormParams p_;
};

class RmsNormLoopKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, rms_norm_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    rms_norm_forward(p_, src[0]->f32(), src[1]->f32(), dst[0]->f32());
    return Status::ok();
  }

 private:
  RmsNormParams p_;
};

}  // namespace

void add_rms_norm_loop_kernel(BackendRegistration& r) {
  r.kernel("RMSNormalization", make_factory<RmsNormLoopKernel>());
}

void add_layer_norm_loop_kernel(BackendRegistration& r, SupportCheck supports) {
  r.kernel("LayerNormalization", make_factory<LayerNormLoopKernel>(), {LayoutUse::kNone, supports});
}

}  // namespace mosaic
