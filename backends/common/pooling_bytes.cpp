// Max pooling of 8-bit codes (backends/common/pooling.hpp): a QDQ model's pools run on the
// codes once its float stretch is a table lookup (core/fuse_qdq_codes.cpp). The maximum of
// codes is the code of the maximum, since quantisation is monotone.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <omp.h>
#if defined(__AVX512VBMI__)
#include <immintrin.h>
#endif

#include "backends/common/pooling.hpp"
#include "backends/common/support.hpp"
#include "core/kernel.hpp"

namespace mosaic {
namespace {

/// m = the element-wise maximum of rows a and b (m may be a), in vector registers.
template <class T>
inline void rows_max(T* m, const T* a, const T* __restrict b, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) m[c] = a[c] > b[c] ? a[c] : b[c];
}

/// y = the first maximum of each window's cells inside x (padding is never a candidate, as
/// ONNX's MaxPool pads with -inf), for nc planes of a 1-3-d window; a window wholly in the
/// padding writes 0, as the oracle does. OpenMP over planes.
#if defined(__AVX512VBMI__)
/// Rows of up to 64 codes in one zmm register each: a window's rows reduced by vector maxima,
/// then for each of the kw columns of a window a byte permutation that brings that column of
/// every output's window under the output (index clamped into the row: a window with a cell
/// inside takes its clamped index's value, which is one of its cells); outputs whose window
/// is wholly in the padding are zeroed (the oracle's 0).
template <class T>
bool max_pool_codes_vbmi(const T* x, T* y, int64_t nc, const Window3& w, int threads) {
  const int64_t H = w.in[1], W = w.in[2], OH = w.out[1], OW = w.out[2], kw = w.k[2];
  if (W > 64 || OW > 64 || kw > 16 || W < 1) return false;
  alignas(64) uint8_t idx[16][64] = {};
  uint64_t empty = 0;
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t w0 = ow * w.s[2] - w.pb[2];
    if (w0 + kw <= 0 || w0 >= W) empty |= uint64_t{1} << ow;
    for (int64_t k = 0; k < kw; ++k) idx[k][ow] = static_cast<uint8_t>(std::clamp<int64_t>(w0 + k, 0, W - 1));
  }
  __m512i perm[16];
  for (int64_t k = 0; k < kw; ++k) perm[k] = _mm512_load_si512(idx[k]);
  const __mmask64 in_mask = W == 64 ? ~__mmask64{0} : (__mmask64{1} << W) - 1;
  const __mmask64 out_mask = (OW == 64 ? ~__mmask64{0} : (__mmask64{1} << OW) - 1) & ~empty;
  const __mmask64 out_all = OW == 64 ? ~__mmask64{0} : (__mmask64{1} << OW) - 1;
  const int64_t in_sp = H * W, out_sp = OH * OW;
  auto vmax = [](__m512i a, __m512i b) {
    return std::is_signed<T>::value ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
  };
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && nc * out_sp > 16384)
  for (int64_t p = 0; p < nc; ++p) {
    const T* xp = x + p * in_sp;
    T* yp = y + p * out_sp;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * w.s[1] - w.pb[1], hs = std::max<int64_t>(h0, 0), he = std::min(h0 + w.k[1], H);
      if (hs >= he) {
        _mm512_mask_storeu_epi8(yp + oh * OW, out_all, _mm512_setzero_si512());
        continue;
      }
      __m512i m = _mm512_maskz_loadu_epi8(in_mask, xp + hs * W);
      for (int64_t h = hs + 1; h < he; ++h) m = vmax(m, _mm512_maskz_loadu_epi8(in_mask, xp + h * W));
      __m512i r = _mm512_maskz_permutexvar_epi8(~__mmask64{0}, perm[0], m);
      for (int64_t k = 1; k < kw; ++k) r = vmax(r, _mm512_maskz_permutexvar_epi8(~__mmask64{0}, perm[k], m));
      _mm512_mask_storeu_epi8(yp + oh * OW, out_all, _mm512_maskz_mov_epi8(out_mask, r));
    }
  }
  return true;
}
#endif

template <class T>
void max_pool_codes(const T* x, T* y, int64_t nc, const Window3& w, int threads) {
  const int64_t in_sp = w.in_size(), out_sp = w.out_size();
#if defined(__AVX512VBMI__)
  if (w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && w.d[1] == 1 && w.d[2] == 1 &&
      max_pool_codes_vbmi(x, y, nc, w, threads))
    return;
#endif
  // A 1-d or 2-d window without dilation (every CNN's) runs separably, below.
  const bool flat = w.in[0] == 1 && w.k[0] == 1 && w.out[0] == 1 && w.d[1] == 1 && w.d[2] == 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && nc * out_sp > 16384)
  for (int64_t p = 0; p < nc; ++p) {
    const T* xp = x + p * in_sp;
    T* yp = y + p * out_sp;
    if (flat && w.in[2] <= 4096) {
      // Separable: each output row's window rows reduced to one row first (a vector pass over
      // the columns), then each output the maximum of its columns in that row.
      const int64_t H = w.in[1], W = w.in[2], kw = w.k[2], sw = w.s[2], pw = w.pb[2];
      T m[4096];
      for (int64_t oh = 0; oh < w.out[1]; ++oh) {
        const int64_t h0 = oh * w.s[1] - w.pb[1], hs = std::max<int64_t>(h0, 0), he = std::min(h0 + w.k[1], H);
        T* yr = yp + oh * w.out[2];
        if (hs >= he) {
          for (int64_t ow = 0; ow < w.out[2]; ++ow) yr[ow] = T(0);
          continue;
        }
        const T* r0 = xp + hs * W;
        rows_max(m, r0, he - hs > 1 ? r0 + W : r0, W);
        for (int64_t h = hs + 2; h < he; ++h) rows_max(m, m, xp + h * W, W);
        // Outputs whose window lies inside the row (all but the edges) without clamps, the
        // common widths unrolled; the edges clamped.
        const int64_t ow_out = w.out[2], lo = std::min(ow_out, (pw + sw - 1) / sw);
        const int64_t hi = W - kw + pw < 0 ? lo : std::max(lo, std::min(ow_out, (W - kw + pw) / sw + 1));
        if (kw == 2)
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] = std::max(m[ow * sw - pw], m[ow * sw - pw + 1]);
        else if (kw == 3)
          for (int64_t ow = lo; ow < hi; ++ow)
            yr[ow] = std::max(std::max(m[ow * sw - pw], m[ow * sw - pw + 1]), m[ow * sw - pw + 2]);
        else
          for (int64_t ow = lo; ow < hi; ++ow) {
            T best = m[ow * sw - pw];
            for (int64_t c = 1; c < kw; ++c) best = std::max(best, m[ow * sw - pw + c]);
            yr[ow] = best;
          }
        for (int64_t ow = 0; ow < ow_out; ++ow) {
          if (ow == lo) ow = hi;
          if (ow >= ow_out) break;
          const int64_t w0 = ow * sw - pw, ws = std::max<int64_t>(w0, 0), we = std::min(w0 + kw, W);
          if (ws >= we) {
            yr[ow] = T(0);
            continue;
          }
          T best = m[ws];
          for (int64_t c = ws + 1; c < we; ++c) best = std::max(best, m[c]);
          yr[ow] = best;
        }
      }
      continue;
    }
    int64_t o = 0;
    for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
      for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
        for (int64_t o2 = 0; o2 < w.out[2]; ++o2, ++o) {
          bool any = false;
          T best = 0;
          w.each_cell(o0, o1, o2, [&](int64_t off) {
            if (!any || xp[off] > best) best = xp[off];
            any = true;
          });
          yp[o] = any ? best : T(0);
        }
  }
}

class CodesMaxPoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.has_output(1)) return Status::unsupported(ctx.node->label() + ": 8-bit MaxPool with Indices");
    if (ctx.training) return Status::unsupported(ctx.node->label() + ": 8-bit MaxPool in training");
    if (ctx.input_layout(0)) return Status::unsupported(ctx.node->label() + ": 8-bit MaxPool reads plain tensors");
    MOSAIC_ASSIGN_OR_RETURN(PoolParams p, pool_params(ctx));
    if (p.win.rank() < 1 || p.win.rank() > 3)
      return Status::unsupported(ctx.node->label() + ": 8-bit MaxPool of " + std::to_string(p.win.rank()) + " axes");
    w_ = Window3(p.win);
    nc_ = p.n * p.c;
    signed_ = ctx.inputs[0].dtype == DType::kI8;
    threads_ = omp_get_max_threads();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (signed_)
      max_pool_codes(static_cast<const int8_t*>(src[0]->data()), static_cast<int8_t*>(dst[0]->data()), nc_, w_, threads_);
    else
      max_pool_codes(static_cast<const uint8_t*>(src[0]->data()), static_cast<uint8_t*>(dst[0]->data()), nc_, w_, threads_);
    return Status::ok();
  }

 private:
  Window3 w_;
  int64_t nc_ = 0;
  bool signed_ = false;
  int threads_ = 1;
};

bool codes(DType t) { return t == DType::kU8 || t == DType::kI8; }

}  // namespace

KernelFactory codes_max_pool_factory() { return make_factory<CodesMaxPoolKernel>(); }

KernelFactory with_codes_max_pool(KernelFactory float_factory) {
  return [float_factory](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    if (!ctx.inputs.empty() && codes(ctx.inputs[0].dtype)) return codes_max_pool_factory()(ctx);
    return float_factory(ctx);
  };
}

Status float32_pool_or_codes(const KernelContext& ctx) {
  if (ctx.inputs.empty() || !codes(ctx.inputs[0].dtype)) return float32_pool(ctx);
  if (ctx.node->op_key() != "MaxPool")
    return Status::unsupported(ctx.node->label() + ": 8-bit " + ctx.node->op_type + " (MaxPool only)");
  if (ctx.has_output(1)) return Status::unsupported(ctx.node->label() + ": 8-bit MaxPool with Indices");
  if (ctx.training) return Status::unsupported(ctx.node->label() + ": 8-bit MaxPool in training");
  return Status::ok();
}

}  // namespace mosaic
