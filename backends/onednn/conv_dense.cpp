// The oneDNN backend's convolution on small maps, as one dense matrix product. Where the
// input map has no more pixels than the kernel has taps (VGG16-CIFAR's 512-channel layers on
// 2x2 maps with 3x3 kernels), every output pixel reads every input pixel through exactly one
// tap, so the layer is a linear map from the input's (pixel, channel) vector to the output's:
// in NHWC, Y[N, OH*OW*OC] = X[N, IH*IW*IC] x W', with W' built once from the weights (zero
// where a tap falls in the padding). That product does in_pixels / taps of the convolution's
// multiply-adds (4/9 on 2x2 maps) as one large GEMM, where the direct convolution wastes most
// of its vector lanes on the padding; the schema's FLOP count stays the convolution's.
#include "backends/onednn/onednn_internal.hpp"
#include "ir/checked.hpp"

namespace mosaic::onednn_impl {
namespace {

/// The dense weights may be at most this large (bytes).
constexpr int64_t kMaxDenseBytes = int64_t{64} << 20;
/// Batches below this are bound by reading the (larger) dense weights: the direct convolution.
constexpr int64_t kMinBatch = 8;

class DenseConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx, const ConvParams& p) {
    const Shape& xs = ctx.inputs[0].shape;
    const Shape& ys = ctx.outputs[0].shape;
    const Window& w = p.win;
    const int64_t in_px = w.in[0] * w.in[1], out_px = w.out[0] * w.out[1];
    k_ = in_px * p.c;
    n_out_ = out_px * p.oc;
    oc_ = p.oc;
    out_px_ = out_px;
    has_bias_ = p.has_bias;
    // W'[(q, c), (p, o)] = W[o, c, ky, kx] for the tap through which output pixel p reads
    // input pixel q.
    weights_dense_ = Tensor::empty(TensorDesc{DType::kF32, {k_, n_out_}}, ctx.tracker);
    const float* wt = ctx.constant(1)->f32();
    float* wd = weights_dense_.f32();
    const int64_t kh = w.kernel[0], kw = w.kernel[1];
    for (int64_t oy = 0; oy < w.out[0]; ++oy)
      for (int64_t ox = 0; ox < w.out[1]; ++ox)
        for (int64_t ky = 0; ky < kh; ++ky)
          for (int64_t kx = 0; kx < kw; ++kx) {
            const int64_t iy = oy * w.stride[0] - w.pad_begin[0] + ky * w.dilation[0];
            const int64_t ix = ox * w.stride[1] - w.pad_begin[1] + kx * w.dilation[1];
            if (iy < 0 || iy >= w.in[0] || ix < 0 || ix >= w.in[1]) continue;
            const int64_t q = iy * w.in[1] + ix, px = oy * w.out[1] + ox;
            for (int64_t c = 0; c < p.c; ++c) {
              float* row = wd + (q * p.c + c) * n_out_ + px * p.oc;
              for (int64_t o = 0; o < p.oc; ++o) row[o] += wt[((o * p.c + c) * kh + ky) * kw + kx];
            }
          }
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
      }
      prim_ = dnnl::matmul(pd);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (has_bias_)  // the bias of each output channel, once per output pixel
      for (int64_t px = 0; px < out_px_; ++px) std::copy(src[2]->f32(), src[2]->f32() + oc_, bias_tiled_.begin() + px * oc_);
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
  int64_t k_ = 0, n_out_ = 0, oc_ = 0, out_px_ = 0;
  bool has_bias_ = false;
  Tensor weights_dense_;  ///< W' [K, N_out], kept only where the primitive reads it as it is
  Staged src_, dst_;
  Weights weights_;
  memory a_, y_, bias_;
  std::vector<float> bias_tiled_;
  std::shared_ptr<const Layout> out_layout_;
  dnnl::matmul prim_;
};

}  // namespace

Expected<std::unique_ptr<Kernel>> small_map_conv(const KernelContext& ctx) {
  if (ctx.training || ctx.precision != Precision::kF32 || !ctx.constant(1) || ctx.inputs[0].dtype != DType::kF32 ||
      ctx.constant(1)->dtype() != DType::kF32)
    return std::unique_ptr<Kernel>();
  auto params = conv_params(ctx);
  if (!params.ok()) return std::unique_ptr<Kernel>();  // the direct kernel reports it
  const ConvParams& p = params.value();
  if (p.group != 1 || p.win.rank() != 2 || p.n < kMinBatch) return std::unique_ptr<Kernel>();
  const int64_t in_px = p.win.in[0] * p.win.in[1], taps = p.win.kernel[0] * p.win.kernel[1];
  const int64_t out_px = p.win.out[0] * p.win.out[1];
  int64_t rows = 0, cols = 0, bytes = 0;
  if (in_px > taps || !checked_mul(in_px, p.c, &rows) || !checked_mul(out_px, p.oc, &cols) ||
      !checked_mul(rows, cols, &bytes) || !checked_mul(bytes, 4, &bytes) || bytes > kMaxDenseBytes)
    return std::unique_ptr<Kernel>();
  auto k = std::make_unique<DenseConvKernel>();
  MOSAIC_RETURN_IF_ERROR(k->init(ctx, p));
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace mosaic::onednn_impl
