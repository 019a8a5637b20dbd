#include "backends/common/conv_dense.hpp"

#include "ir/checked.hpp"

namespace mosaic {

namespace {
/// W' may be at most this large (bytes).
constexpr int64_t kMaxDenseBytes = int64_t{64} << 20;
/// Batches below this are bound by reading W': the direct kernels.
constexpr int64_t kMinBatch = 8;
}  // namespace

bool small_map_dense_applies(const KernelContext& ctx, const ConvParams& p, bool grouped) {
  if (ctx.training || ctx.precision != Precision::kF32 || !ctx.constant(1) || ctx.inputs[0].dtype != DType::kF32 ||
      ctx.constant(1)->dtype() != DType::kF32)
    return false;
  // A grouped convolution takes it at any batch where the caller says the alternative is a
  // GEMM per group (oneDNN's gemm:jit where it has no depthwise kernel for the shape: 100x
  // slower at batch 2 on a 5x5 depthwise kernel over a 1x1 map, docs/performance.md).
  if (p.win.rank() != 2 || (p.group > 1 && !grouped) || (p.group == 1 && p.n < kMinBatch)) return false;
  const int64_t in_px = p.win.in[0] * p.win.in[1], taps = p.win.kernel[0] * p.win.kernel[1];
  const int64_t out_px = p.win.out[0] * p.win.out[1];
  int64_t rows = 0, cols = 0, bytes = 0;
  return in_px <= taps && checked_mul(in_px, p.c, &rows) && checked_mul(out_px, p.oc, &cols) &&
         checked_mul(rows, cols, &bytes) && checked_mul(bytes, 4, &bytes) && bytes <= kMaxDenseBytes;
}

Tensor small_map_dense_weights(const ConvParams& p, const float* w, bool channels_last, MemoryTracker* tracker) {
  const Window& win = p.win;
  const int64_t in_px = win.in[0] * win.in[1], out_px = win.out[0] * win.out[1];
  const int64_t n_out = out_px * p.oc, kh = win.kernel[0], kw = win.kernel[1];
  Tensor dense = Tensor::empty(TensorDesc{DType::kF32, {in_px * p.c, n_out}}, tracker);
  float* wd = dense.f32();
  for (int64_t oy = 0; oy < win.out[0]; ++oy)
    for (int64_t ox = 0; ox < win.out[1]; ++ox)
      for (int64_t ky = 0; ky < kh; ++ky)
        for (int64_t kx = 0; kx < kw; ++kx) {
          const int64_t iy = oy * win.stride[0] - win.pad_begin[0] + ky * win.dilation[0];
          const int64_t ix = ox * win.stride[1] - win.pad_begin[1] + kx * win.dilation[1];
          if (iy < 0 || iy >= win.in[0] || ix < 0 || ix >= win.in[1]) continue;
          // Output pixel px reads input pixel q through tap (ky, kx); channel c feeds only
          // the output channels of its group (zero elsewhere).
          const int64_t q = iy * win.in[1] + ix, px = oy * win.out[1] + ox;
          const int64_t cg = p.c_per_group(), ocg = p.oc_per_group();
          for (int64_t c = 0; c < p.c; ++c) {
            const int64_t row = channels_last ? q * p.c + c : c * in_px + q;
            const int64_t g = c / cg, ci = c - g * cg;
            for (int64_t o = g * ocg; o < (g + 1) * ocg; ++o) {
              const int64_t col = channels_last ? px * p.oc + o : o * out_px + px;
              wd[row * n_out + col] += w[((o * cg + ci) * kh + ky) * kw + kx];
            }
          }
        }
  return dense;
}

}  // namespace mosaic
