// Max pooling of 8-bit codes (backends/common/pooling.hpp): a QDQ model's pools run on the
// codes once its float stretch is a table lookup (core/fuse_qdq_codes.cpp). The maximum of
// codes is the code of the maximum, since quantisation is monotone.
#include <algorithm>
#include <cstdint>

#include <omp.h>

#include "backends/common/pooling.hpp"
#include "backends/common/support.hpp"
#include "core/kernel.hpp"

namespace mosaic {
namespace {

/// y = the first maximum of each window's cells inside x (padding is never a candidate, as
/// ONNX's MaxPool pads with -inf), for nc planes of a 1-3-d window; a window wholly in the
/// padding writes 0, as the oracle does. OpenMP over planes.
template <class T>
void max_pool_codes(const T* x, T* y, int64_t nc, const Window3& w, int threads) {
  const int64_t in_sp = w.in_size(), out_sp = w.out_size();
  // A 1-d or 2-d window without dilation (every CNN's): each window's rows clamped to the
  // input, no per-cell test.
  const bool flat = w.in[0] == 1 && w.k[0] == 1 && w.d[1] == 1 && w.d[2] == 1;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && nc * out_sp > 16384)
  for (int64_t p = 0; p < nc; ++p) {
    const T* xp = x + p * in_sp;
    T* yp = y + p * out_sp;
    if (flat && w.k[1] == 2 && w.k[2] == 2 && w.s[1] == 2 && w.s[2] == 2 && w.pb[2] <= 1 && w.in[2] <= 4096) {
      // 2x2 windows, stride 2 (VGG's, ResNet's): the two rows' maxima first, a vector pass,
      // then each output the larger of two neighbours (padding columns never win).
      const int64_t H = w.in[1], W = w.in[2], pw = w.pb[2];
      T m[4096];
      for (int64_t oh = 0; oh < w.out[1]; ++oh) {
        const int64_t h0 = oh * 2 - w.pb[1];
        const T* r0 = h0 >= 0 && h0 < H ? xp + h0 * W : nullptr;
        const T* r1 = h0 + 1 >= 0 && h0 + 1 < H ? xp + (h0 + 1) * W : nullptr;
        T* yr = yp + oh * w.out[2];
        if (!r0 && !r1) {
          for (int64_t ow = 0; ow < w.out[2]; ++ow) yr[ow] = T(0);
          continue;
        }
        const T* a = r0 ? r0 : r1;
        const T* b = r1 ? r1 : r0;
        for (int64_t c = 0; c < W; ++c) m[c] = std::max(a[c], b[c]);
        // Outputs whose two columns are both inside (all but the edges), without a test each.
        const int64_t lo = pw, hi = std::max<int64_t>(lo, std::min<int64_t>(w.out[2], (W + pw) / 2));
        for (int64_t ow = lo; ow < hi; ++ow) yr[ow] = std::max(m[2 * ow - pw], m[2 * ow - pw + 1]);
        for (int64_t ow = 0; ow < w.out[2]; ++ow) {
          if (ow == lo) ow = hi;
          if (ow >= w.out[2]) break;
          const int64_t c0 = ow * 2 - pw, c1 = c0 + 1;
          const bool in0 = c0 >= 0 && c0 < W, in1 = c1 >= 0 && c1 < W;
          yr[ow] = in0 && in1 ? std::max(m[c0], m[c1]) : in0 ? m[c0] : in1 ? m[c1] : T(0);
        }
      }
      continue;
    }
    if (flat) {
      const int64_t H = w.in[1], W = w.in[2];
      for (int64_t oh = 0; oh < w.out[1]; ++oh) {
        const int64_t h0 = oh * w.s[1] - w.pb[1], hs = std::max<int64_t>(h0, 0), he = std::min(h0 + w.k[1], H);
        T* yr = yp + oh * w.out[2];
        for (int64_t ow = 0; ow < w.out[2]; ++ow) {
          const int64_t w0 = ow * w.s[2] - w.pb[2], ws = std::max<int64_t>(w0, 0), we = std::min(w0 + w.k[2], W);
          if (hs >= he || ws >= we) {
            yr[ow] = T(0);
            continue;
          }
          T best = xp[hs * W + ws];
          for (int64_t h = hs; h < he; ++h)
            for (int64_t c = ws; c < we; ++c) best = std::max(best, xp[h * W + c]);
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
