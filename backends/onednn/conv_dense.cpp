// The oneDNN backend's convolution on small maps as one dense matrix product in NHWC
// (backends/common/conv_dense.hpp): Y[N, OH*OW*OC] = X[N, IH*IW*IC] x W', oneDNN's matmul
// with W' packed once, the bias tiled over the output pixels and the fused activation as a
// post-op; the input arrives in, and the output may stay in, oneDNN's NHWC layout.
#include "backends/common/conv_dense.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

class DenseConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx, const ConvParams& p) {
    const Shape& xs = ctx.inputs[0].shape;
    const Shape& ys = ctx.outputs[0].shape;
    const int64_t in_px = p.win.in[0] * p.win.in[1], out_px = p.win.out[0] * p.win.out[1];
    k_ = in_px * p.c;
    n_out_ = out_px * p.oc;
    oc_ = p.oc;
    out_px_ = out_px;
    has_bias_ = p.has_bias;
    weights_dense_ = small_map_dense_weights(p, ctx.constant(1)->f32(), /*channels_last=*/true, ctx.tracker);
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc x_nhwc(dims(xs), dt::f32, tag::nhwc), y_nhwc(dims(ys), dt::f32, tag::nhwc);
      src_.init(input_md(ctx, 0), x_nhwc, ctx.tracker, false);
      const memory::desc out_md = ctx.layout_free(0) ? y_nhwc : plain(ys);
      dst_.init(out_md, y_nhwc, ctx.tracker, true);
      out_layout_ = layout_of(out_md, ys);
      const int64_t batch = xs[0];
      const memory::desc a({batch, k_}, dt::f32, tag::ab), y({batch, n_out_}, dt::f32, tag::ab);
      const memory::desc b_any({k_, n_out_}, dt::f32, tag::any), bias({1, n_out_}, dt::f32, tag::ab);
      auto d = has_bias_ ? dnnl::matmul::desc(a, b_any, bias, y) : dnnl::matmul::desc(a, b_any, y);
      MOSAIC_ASSIGN_OR_RETURN(const dnnl::primitive_attr attr, activation_attr(fused_activation(*ctx.node), *ctx.node));
      dnnl::matmul::primitive_desc pd(d, attr, engine());
      weights_.init(plain({k_, n_out_}), pd.weights_desc(), &weights_dense_, ctx.tracker);
      if (weights_.copy()) weights_dense_ = Tensor();  // the primitive reads its packed copy
      a_ = memory(a, engine(), DNNL_MEMORY_NONE);
      y_ = memory(y, engine(), DNNL_MEMORY_NONE);
      if (has_bias_) {
        bias_tiled_.assign(static_cast<size_t>(n_out_), 0.f);
        bias_ = memory(bias, engine(), bias_tiled_.data());
        bias_is_constant_ = ctx.constant(2) != nullptr;
        if (bias_is_constant_) tile_bias(ctx.constant(2)->f32());  // once; a run-time bias per call
      }
      prim_ = dnnl::matmul(pd);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (has_bias_ && !bias_is_constant_) tile_bias(src[2]->f32());
    src_.bind_in(src[0]);
    dst_.bind_out(dst[0]);
    a_.set_data_handle(src_.internal.get_data_handle());
    y_.set_data_handle(dst_.internal.get_data_handle());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, weights_.get(nullptr)}, {DNNL_ARG_DST, y_}};
    if (has_bias_) args[DNNL_ARG_BIAS] = bias_;
    prim_.execute(stream(), args);
    dst_.finish_out();
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override {
    return src_.owned_bytes() + dst_.owned_bytes() + weights_.bytes() +
           (weights_dense_.defined() ? weights_dense_.bytes() : 0) + bias_tiled_.size() * sizeof(float);
  }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }

 private:
  static memory::dims dims(const Shape& s) { return memory::dims(s.begin(), s.end()); }
  /// The bias of each output channel, once per output pixel (the product's columns).
  void tile_bias(const float* b) {
    for (int64_t px = 0; px < out_px_; ++px) std::copy(b, b + oc_, bias_tiled_.begin() + px * oc_);
  }
  int64_t k_ = 0, n_out_ = 0, oc_ = 0, out_px_ = 0;
  bool has_bias_ = false, bias_is_constant_ = false;
  Tensor weights_dense_;  ///< W' [K, N_out], kept only where the primitive reads it as it is
  Staged src_, dst_;
  Weights weights_;
  memory a_, y_, bias_;
  std::vector<float> bias_tiled_;
  std::shared_ptr<const Layout> out_layout_;
  dnnl::matmul prim_;
};

}  // namespace

Expected<std::unique_ptr<Kernel>> small_map_conv(const KernelContext& ctx, bool grouped) {
  auto params = conv_params(ctx);
  if (!params.ok() || !small_map_dense_applies(ctx, params.value(), grouped)) return std::unique_ptr<Kernel>();
  auto k = std::make_unique<DenseConvKernel>();
  MOSAIC_RETURN_IF_ERROR(k->init(ctx, params.value()));
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace mosaic::onednn_impl
