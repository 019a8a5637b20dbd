// LayerNormalization's, RMSNormalization's and GroupNormalization's loops as kernels (backends/common/layer_norm.hpp).
#include "backends/common/layer_norm.hpp"

#include <cmath>

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

/// GroupNormalization and InstanceNormalization (the case of one channel a group): each
/// (image, group) over its channels' spatial positions, in double, then scaled and shifted
/// per channel (or per group: GroupNormalization before opset 21). Forward only.
class GroupNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, ctx.node->op_type == "GroupNormalization" ? group_norm_params(ctx)
                                                                          : instance_norm_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float *x = src[0]->f32(), *scale = src[1]->f32(), *bias = src[2]->f32();
    float* y = dst[0]->f32();
    const int64_t per_group = p_.channels / p_.groups, len = per_group * p_.spatial;
    const double n = static_cast<double>(len);
    for (int64_t g = 0; g < p_.batch * p_.groups; ++g) {
      const float* xs = x + g * len;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < len; ++i) mean += xs[i];
      mean /= n;
      for (int64_t i = 0; i < len; ++i) var += (xs[i] - mean) * (xs[i] - mean);
      var /= n;
      const double inv = 1.0 / std::sqrt(var + p_.epsilon);
      for (int64_t k = 0; k < per_group; ++k) {
        const int64_t c = (g % p_.groups) * per_group + k, a = p_.affine_per_group ? c / per_group : c;
        const double mul = scale[a] * inv;
        const float* xc = xs + k * p_.spatial;
        float* yc = y + g * len + k * p_.spatial;
        for (int64_t i = 0; i < p_.spatial; ++i) yc[i] = static_cast<float>((xc[i] - mean) * mul + bias[a]);
      }
    }
    return Status::ok();
  }

 private:
  GroupNormParams p_;
};

}  // namespace

void add_rms_norm_loop_kernel(BackendRegistration& r) {
  r.kernel("RMSNormalization", make_factory<RmsNormLoopKernel>());
}

void add_group_norm_loop_kernel(BackendRegistration& r) {
  r.kernel("InstanceNormalization", make_factory<GroupNormKernel>());
  r.kernel("GroupNormalization", make_factory<GroupNormKernel>());
}

void add_layer_norm_loop_kernel(BackendRegistration& r, SupportCheck supports) {
  r.kernel("LayerNormalization", make_factory<LayerNormLoopKernel>(), {LayoutUse::kNone, supports});
}

}  // namespace mosaic
