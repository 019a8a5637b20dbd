#include "backends/common/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mosaic {

void max_pool_backward(const float* x, const float* dy, float* dx, int64_t nc, const Window& w, float tie_rtol) {
  // Lift to 3-d: missing leading dims have extent 1.
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, p[3] = {0, 0, 0};
  const size_t r = w.rank(), off = 3 - r;
  for (size_t i = 0; i < r; ++i) {
    in[off + i] = w.in[i], out[off + i] = w.out[i], k[off + i] = w.kernel[i];
    s[off + i] = w.stride[i], d[off + i] = w.dilation[i], p[off + i] = w.pad_begin[i];
  }
  const int64_t in_sp = in[0] * in[1] * in[2], out_sp = out[0] * out[1] * out[2];
  if (in[0] == 1 && k[0] == 1 && k[1] == 2 && k[2] == 2 && s[1] == 2 && s[2] == 2 && p[1] == 0 && p[2] == 0 &&
      d[1] == 1 && d[2] == 1 && in[1] == 2 * out[1] && in[2] == 2 * out[2]) {
    // 2x2 windows tiling the input (the common CNN pool): each element is written once,
    // branch-free, a row pair at a time so the compiler vectorises along W.
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t o1 = 0; o1 < out[1]; ++o1) {
        const float* r0 = x + c * in_sp + 2 * o1 * in[2];
        const float* r1 = r0 + in[2];
        float* d0 = dx + c * in_sp + 2 * o1 * in[2];
        float* d1 = d0 + in[2];
        const float* g = dy + c * out_sp + o1 * out[2];
#pragma omp simd
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          const float a = r0[2 * o2], b = r0[2 * o2 + 1], e = r1[2 * o2], f = r1[2 * o2 + 1];
          float m = -INFINITY;  // the same NaN handling as the general loop below
          m = m < a ? a : m;
          m = m < b ? b : m;
          m = m < e ? e : m;
          m = m < f ? f : m;
          const float floor = m - std::fabs(m) * tie_rtol;
          const bool ta = a >= floor, tb = !ta && b >= floor, te = !ta && !tb && e >= floor,
                     tf = !ta && !tb && !te && f >= floor;
          const float gv = g[o2];
          d0[2 * o2] = ta ? gv : 0.f;
          d0[2 * o2 + 1] = tb ? gv : 0.f;
          d1[2 * o2] = te ? gv : 0.f;
          d1[2 * o2 + 1] = tf ? gv : 0.f;
        }
      }
    }
    return;
  }
  if (in[0] == 1 && k[0] == 1 && d[1] == 1 && d[2] == 1) {
    // 1-d and 2-d windows without dilation: clip each window once, find its maximum, then
    // the first element (in window order) within the tie tolerance of it.
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; ++c) {
      const float* xc = x + c * in_sp;
      const float* dyc = dy + c * out_sp;
      float* dxc = dx + c * in_sp;
      std::fill(dxc, dxc + in_sp, 0.f);
      for (int64_t o1 = 0; o1 < out[1]; ++o1) {
        const int64_t h0 = std::max<int64_t>(0, o1 * s[1] - p[1]), h1 = std::min(in[1], o1 * s[1] - p[1] + k[1]);
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          const int64_t w0 = std::max<int64_t>(0, o2 * s[2] - p[2]), w1 = std::min(in[2], o2 * s[2] - p[2] + k[2]);
          if (h0 >= h1 || w0 >= w1) continue;
          float best = -INFINITY;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) best = std::max(best, xc[h * in[2] + w]);
          const float floor = best - std::fabs(best) * tie_rtol;
          const float g = dyc[o1 * out[2] + o2];
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w)
              if (xc[h * in[2] + w] >= floor) {
                dxc[h * in[2] + w] += g;
                h = h1;  // first one only
                break;
              }
        }
      }
    }
    return;
  }
  std::fill(dx, dx + nc * in_sp, 0.f);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < nc; ++c) {
    const float* xc = x + c * in_sp;
    const float* dyc = dy + c * out_sp;
    float* dxc = dx + c * in_sp;
    std::vector<int64_t> cand;
    cand.reserve(static_cast<size_t>(k[0] * k[1] * k[2]));
    for (int64_t o0 = 0; o0 < out[0]; ++o0)
      for (int64_t o1 = 0; o1 < out[1]; ++o1)
        for (int64_t o2 = 0; o2 < out[2]; ++o2) {
          cand.clear();
          float best = -INFINITY;
          for (int64_t a = 0; a < k[0]; ++a) {
            const int64_t i0 = o0 * s[0] - p[0] + a * d[0];
            if (i0 < 0 || i0 >= in[0]) continue;
            for (int64_t b = 0; b < k[1]; ++b) {
              const int64_t i1 = o1 * s[1] - p[1] + b * d[1];
              if (i1 < 0 || i1 >= in[1]) continue;
              for (int64_t e = 0; e < k[2]; ++e) {
                const int64_t i2 = o2 * s[2] - p[2] + e * d[2];
                if (i2 < 0 || i2 >= in[2]) continue;
                const int64_t idx = (i0 * in[1] + i1) * in[2] + i2;
                cand.push_back(idx);
                best = std::max(best, xc[idx]);
              }
            }
          }
          if (cand.empty()) continue;
          const float floor = best - std::fabs(best) * tie_rtol;
          for (int64_t idx : cand)
            if (xc[idx] >= floor) {
              dxc[idx] += dyc[(o0 * out[1] + o1) * out[2] + o2];
              break;
            }
        }
  }
}

}  // namespace mosaic
