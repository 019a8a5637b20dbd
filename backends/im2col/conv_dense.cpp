// The im2col backend's convolution on small maps as one dense matrix product in NCHW
// (backends/common/conv_dense.hpp): Y[N, OC*OH*OW] = X[N, IC*IH*IW] x W' by one cblas_sgemm,
// then the bias and a fused activation over each output channel's pixels.
#include <cblas.h>

#include "backends/common/conv_dense.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {
namespace {

class DenseConvKernel final : public Kernel {
 public:
  void init(const KernelContext& ctx, const ConvParams& p) {
    batch_ = p.n;
    out_px_ = p.win.out[0] * p.win.out[1];
    oc_ = p.oc;
    k_ = p.win.in[0] * p.win.in[1] * p.c;
    has_bias_ = p.has_bias;
    act_ = fused_activation(*ctx.node);
    weights_ = small_map_dense_weights(p, ctx.constant(1)->f32(), /*channels_last=*/false, ctx.tracker);
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t n_out = oc_ * out_px_;
    float* y = dst[0]->f32();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch_, n_out, k_, 1.f, src[0]->f32(), k_,
                weights_.f32(), n_out, 0.f, y, n_out);
    const float* bias = has_bias_ ? src[2]->f32() : nullptr;
    if (!bias && !act_.active()) return Status::ok();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch_ * oc_; ++i) {  // one output channel of one image
      float* yc = y + i * out_px_;
      if (bias) ArrayMap(yc, out_px_) += bias[i % oc_];
      if (act_.active()) apply_activation(act_, yc, out_px_);
    }
    return Status::ok();
  }
  size_t workspace_bytes() const override { return weights_.bytes(); }

 private:
  int64_t batch_ = 0, out_px_ = 0, oc_ = 0, k_ = 0;
  bool has_bias_ = false;
  Activation act_;
  Tensor weights_;  ///< W' [IC*IH*IW, OC*OH*OW]
};

}  // namespace

Expected<std::unique_ptr<Kernel>> small_map_conv(const KernelContext& ctx) {
  auto params = conv_params(ctx);
  if (!params.ok() || !small_map_dense_applies(ctx, params.value())) return std::unique_ptr<Kernel>();
  auto k = std::make_unique<DenseConvKernel>();
  k->init(ctx, params.value());
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace mosaic::im2col_impl
