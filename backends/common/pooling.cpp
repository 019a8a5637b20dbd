#include "backends/common/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mosaic {

namespace {

/// One 2x2 window: the gradient goes to the first element (in window order) within the tie
/// tolerance of the maximum. Written with bitwise logic so loops over it vectorise.
inline void route_2x2(float a, float b, float e, float f, float g, float tie_rtol, float& qa, float& qb, float& qe,
                      float& qf) {
  float m = -INFINITY;  // NaN elements never win, as in the general loop
  m = m < a ? a : m;
  m = m < b ? b : m;
  m = m < e ? e : m;
  m = m < f ? f : m;
  const float floor = m - std::fabs(m) * tie_rtol;
  const int ta = a >= floor, tb = (b >= floor) & ~ta & 1, te = (e >= floor) & ~(ta | tb) & 1,
            tf = (f >= floor) & ~(ta | tb | te) & 1;
  qa = ta ? g : 0.f;
  qb = tb ? g : 0.f;
  qe = te ? g : 0.f;
  qf = tf ? g : 0.f;
}

/// Spatial offsets of the window of output (o0, o1, o2) inside the input, in window order.
void window_cells(const Window3& w, int64_t o0, int64_t o1, int64_t o2, std::vector<int64_t>& cand) {
  cand.clear();
  w.each_cell(o0, o1, o2, [&](int64_t off) { cand.push_back(off); });
}

/// Lane-blocked max-pool backward; kL > 0 fixes the lane count at compile time so the lane
/// loops vectorise (16 lanes: one AVX-512 register).
template <int kL>
void max_pool_backward_blocked(const float* x, const float* dy, float* dx, int64_t outer, int lanes, const Window& win,
                               float tie_rtol) {
  const int L = kL > 0 ? kL : lanes;
  const Window3 w(win);
  const int64_t in_sp = w.in[0] * w.in[1] * w.in[2], out_sp = w.out[0] * w.out[1] * w.out[2];
  if (kL > 0 && w.in[0] == 1 && w.k[0] == 1 && w.k[1] == 2 && w.k[2] == 2 && w.s[1] == 2 && w.s[2] == 2 &&
      w.pb[1] == 0 && w.pb[2] == 0 && w.d[1] == 1 && w.d[2] == 1 && w.in[1] == 2 * w.out[1] && w.in[2] == 2 * w.out[2]) {
    // 2x2 windows tiling the input: every element written once, branch-free across lanes.
    const int64_t row = w.in[2] * L;
#pragma omp parallel for schedule(static)
    for (int64_t co = 0; co < outer * w.out[1]; ++co) {
      const int64_t c = co / w.out[1], o1 = co % w.out[1];
      const float* r0 = x + c * in_sp * L + 2 * o1 * row;
      float* d0 = dx + c * in_sp * L + 2 * o1 * row;
      const float* g = dy + (c * out_sp + o1 * w.out[2]) * L;
      for (int64_t o2 = 0; o2 < w.out[2]; ++o2) {
        const float *__restrict pa = r0 + 2 * o2 * L, *__restrict pb = pa + L, *__restrict pe = pa + row,
                    *__restrict pf = pe + L, *__restrict gv = g + o2 * L;
        float *__restrict qa = d0 + 2 * o2 * L, *__restrict qb = qa + L, *__restrict qe = qa + row,
              *__restrict qf = qe + L;
#pragma omp simd
        for (int l = 0; l < kL; ++l) route_2x2(pa[l], pb[l], pe[l], pf[l], gv[l], tie_rtol, qa[l], qb[l], qe[l], qf[l]);
      }
    }
    return;
  }
  // General windows: per output, the lanes' maxima, then the first element of each lane
  // within the tie tolerance takes that lane's gradient. Lane state sits in fixed arrays
  // (registers when kL is known), with masks instead of branches.
  constexpr int kMax = kL > 0 ? kL : 64;
  if (L > kMax) {
    // Wider than any oneDNN channel block: the plain routine, lane by lane.
    std::vector<float> px(in_sp), pdy(out_sp), pdx(in_sp);
    for (int64_t c = 0; c < outer; ++c)
      for (int l = 0; l < L; ++l) {
        for (int64_t i = 0; i < in_sp; ++i) px[i] = x[(c * in_sp + i) * L + l];
        for (int64_t i = 0; i < out_sp; ++i) pdy[i] = dy[(c * out_sp + i) * L + l];
        max_pool_backward(px.data(), pdy.data(), pdx.data(), 1, win, tie_rtol);
        for (int64_t i = 0; i < in_sp; ++i) dx[(c * in_sp + i) * L + l] = pdx[i];
      }
    return;
  }
#pragma omp parallel
  {
    std::vector<int64_t> cand;
    cand.reserve(static_cast<size_t>(w.k[0] * w.k[1] * w.k[2]));
#pragma omp for schedule(static)
    for (int64_t c = 0; c < outer; ++c) {
      const float* __restrict xc = x + c * in_sp * L;
      const float* __restrict dyc = dy + c * out_sp * L;
      float* __restrict dxc = dx + c * in_sp * L;
      std::fill(dxc, dxc + in_sp * L, 0.f);
      int64_t o = 0;
      for (int64_t o0 = 0; o0 < w.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < w.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < w.out[2]; ++o2, ++o) {
            window_cells(w, o0, o1, o2, cand);
            if (cand.empty()) continue;
            alignas(64) float b[kMax], f[kMax], open[kMax];
            for (int l = 0; l < L; ++l) b[l] = -INFINITY;
            for (int64_t idx : cand) {
              const float* __restrict v = xc + idx * L;
#pragma omp simd
              for (int l = 0; l < L; ++l) b[l] = b[l] < v[l] ? v[l] : b[l];
            }
#pragma omp simd
            for (int l = 0; l < L; ++l) {
              f[l] = b[l] - std::fabs(b[l]) * tie_rtol;
              open[l] = 1.f;  // 1 until the lane's gradient is routed
            }
            const float* __restrict g = dyc + o * L;
            for (int64_t idx : cand) {
              const float* __restrict v = xc + idx * L;
              float* __restrict d = dxc + idx * L;
#pragma omp simd
              for (int l = 0; l < L; ++l) {
                const bool hit = (v[l] >= f[l]) & (open[l] > 0.f);
                d[l] += hit ? g[l] : 0.f;
                open[l] = hit ? 0.f : open[l];
              }
            }
          }
    }
  }
}

/// Max over interior windows of one output row of [H][W][kL] data into yr ([ow][kL]): one
/// pass over the output row per window cell, each a vector max across the lanes.
template <int kL>
inline void max_row_lanes(const float* xo, float* yr, int64_t oy, const Window3& w) {
  const int64_t iw = w.in[2], ow = w.out[2], sw = w.s[2];
  const float* x0 = xo + oy * w.s[1] * iw * kL;
  for (int64_t ox = 0; ox < ow; ++ox)
    for (int l = 0; l < kL; ++l) yr[ox * kL + l] = x0[ox * sw * kL + l];
  for (int64_t ki = 0; ki < w.k[1]; ++ki)
    for (int64_t kj = 0; kj < w.k[2]; ++kj) {
      if (ki == 0 && kj == 0) continue;
      const float* xr = x0 + (ki * w.d[1] * iw + kj * w.d[2]) * kL;
      for (int64_t ox = 0; ox < ow; ++ox)
        for (int l = 0; l < kL; ++l) yr[ox * kL + l] = std::max(yr[ox * kL + l], xr[ox * sw * kL + l]);
    }
}

/// One plain output row: 2x2 windows with stride 2 read two input rows in pairs (a loop the
/// compiler vectorises with de-interleaving loads); other windows take a pass per cell.
inline void max_row_plain(const float* xc, float* yr, int64_t oy, const Window3& w) {
  const int64_t iw = w.in[2], ow = w.out[2];
  if (w.k[1] == 2 && w.k[2] == 2 && w.s[1] == 2 && w.s[2] == 2 && w.d[1] == 1 && w.d[2] == 1) {
    const float *__restrict r0 = xc + 2 * oy * iw, *__restrict r1 = r0 + iw;
    float* __restrict out = yr;
    for (int64_t ox = 0; ox < ow; ++ox)  // window order: the same first-NaN rule as the general loop
      out[ox] = std::max(std::max(std::max(r0[2 * ox], r0[2 * ox + 1]), r1[2 * ox]), r1[2 * ox + 1]);
    return;
  }
  max_row_lanes<1>(xc, yr, oy, w);
}

template <int kL>
void max_forward_blocked(const float* x, float* y, int64_t outer, const Window3& w) {
  const int64_t in_sp = w.in[1] * w.in[2], out_sp = w.out[1] * w.out[2];
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t oy = 0; oy < w.out[1]; ++oy) {
      if constexpr (kL == 1)
        max_row_plain(x + o * in_sp, y + o * out_sp + oy * w.out[2], oy, w);
      else
        max_row_lanes<kL>(x + o * in_sp * kL, y + (o * out_sp + oy * w.out[2]) * kL, oy, w);
    }
}

template <int kL>
void max_forward_unblock(const float* x, float* y, int64_t n, int64_t c, const Window3& w) {
  const int64_t blocks = (c + kL - 1) / kL, in_sp = w.in[1] * w.in[2], oh = w.out[1], ow = w.out[2];
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(ow * kL));
#pragma omp for schedule(static) collapse(2)
    for (int64_t o = 0; o < n * blocks; ++o)
      for (int64_t oy = 0; oy < oh; ++oy) {
        max_row_lanes<kL>(x + o * in_sp * kL, row.data(), oy, w);
        const int64_t b = o % blocks, c0 = b * kL, lanes = std::min<int64_t>(kL, c - c0);
        float* yb = y + ((o / blocks) * c + c0) * oh * ow + oy * ow;
        for (int64_t l = 0; l < lanes; ++l)
          for (int64_t ox = 0; ox < ow; ++ox) yb[l * oh * ow + ox] = row[ox * kL + l];
      }
  }
}

}  // namespace

bool max_pool_is_interior(const Window& w) {
  if (w.rank() < 1 || w.rank() > 2) return false;
  for (size_t a = 0; a < w.rank(); ++a)
    if (w.pad_begin[a] != 0 || w.out[a] < 1 || (w.out[a] - 1) * w.stride[a] + (w.kernel[a] - 1) * w.dilation[a] + 1 > w.in[a])
      return false;
  return true;
}

void max_pool_forward_interior(const float* x, float* y, int64_t outer, int lanes, const Window& win) {
  const Window3 w(win);
  if (lanes == 16) return max_forward_blocked<16>(x, y, outer, w);
  if (lanes == 8) return max_forward_blocked<8>(x, y, outer, w);
  max_forward_blocked<1>(x, y, outer, w);
}

void max_pool_forward_interior_unblock(const float* x, float* y, int64_t n, int64_t c, int lanes, const Window& win) {
  const Window3 w(win);
  if (lanes == 16) return max_forward_unblock<16>(x, y, n, c, w);
  max_forward_unblock<8>(x, y, n, c, w);
}

bool max_pool_is_2x2_stride_2(const Window& w) {
  if (w.rank() != 2) return false;
  for (size_t a = 0; a < 2; ++a)
    if (w.kernel[a] != 2 || w.stride[a] != 2 || w.dilation[a] != 1 || w.pad_begin[a] > 1 || w.pad_end[a] > 1 ||
        w.out[a] < 1)
      return false;
  return true;
}

void max_pool_forward_2x2(const float* x, float* y, int64_t outer, const Window& win) {
  const Window3 w(win);
  const int64_t ih = w.in[1], iw = w.in[2], oh = w.out[1], ow = w.out[2], ph = w.pb[1], pw = w.pb[2];
  const int64_t lo = std::min(pw, ow), hi = std::max(lo, std::min(ow, (iw + pw) / 2));  // columns inside: [lo, hi)
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < outer; ++c) {
    const float* xc = x + c * ih * iw;
    for (int64_t o1 = 0; o1 < oh; ++o1) {
      const int64_t h = 2 * o1 - ph;
      const bool rows_inside = h >= 0 && h + 1 < ih;
      float* __restrict yr = y + (c * oh + o1) * ow;
      if (rows_inside && hi > lo) {
        const int64_t first = 2 * lo - pw, n = hi - lo;
        const float *__restrict r0 = xc + h * iw + first, *__restrict r1 = r0 + iw;
        float* __restrict yl = yr + lo;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) {
          float m = -INFINITY;
          m = m < r0[2 * j] ? r0[2 * j] : m;
          m = m < r0[2 * j + 1] ? r0[2 * j + 1] : m;
          m = m < r1[2 * j] ? r1[2 * j] : m;
          m = m < r1[2 * j + 1] ? r1[2 * j + 1] : m;
          yl[j] = m;
        }
      }
      for (int64_t o2 = 0; o2 < ow; ++o2) {
        if (rows_inside && o2 >= lo && o2 < hi) continue;
        float m = -INFINITY;
        for (int64_t r = std::max<int64_t>(0, h); r < std::min(ih, h + 2); ++r)
          for (int64_t q = std::max<int64_t>(0, 2 * o2 - pw); q < std::min(iw, 2 * o2 - pw + 2); ++q)
            m = m < xc[r * iw + q] ? xc[r * iw + q] : m;
        yr[o2] = m;
      }
    }
  }
}

void max_pool_backward_lanes(const float* x, const float* dy, float* dx, int64_t outer, int lanes, const Window& w,
                             float tie_rtol) {
  switch (lanes) {
    case 16: return max_pool_backward_blocked<16>(x, dy, dx, outer, lanes, w, tie_rtol);
    case 8: return max_pool_backward_blocked<8>(x, dy, dx, outer, lanes, w, tie_rtol);
    default: return max_pool_backward_blocked<0>(x, dy, dx, outer, lanes, w, tie_rtol);
  }
}

void max_pool_backward(const float* x, const float* dy, float* dx, int64_t nc, const Window& w, float tie_rtol) {
  const Window3 w3(w);
  const int64_t(&in)[3] = w3.in, (&out)[3] = w3.out, (&k)[3] = w3.k, (&s)[3] = w3.s, (&d)[3] = w3.d, (&p)[3] = w3.pb;
  const int64_t in_sp = in[0] * in[1] * in[2], out_sp = out[0] * out[1] * out[2];
  if (in[0] == 1 && k[0] == 1 && k[1] == 2 && k[2] == 2 && s[1] == 2 && s[2] == 2 && p[1] <= 1 && p[2] <= 1 &&
      w3.pe[1] <= 1 && w3.pe[2] <= 1 && d[1] == 1 && d[2] == 1) {
    // 2x2 windows at stride 2 (the common CNN pool), at most one padded row and column on each
    // side (a zero Pad folded into the pool: VGG16-CIFAR's training plan). The windows never
    // overlap: each cell has one window at most. Per row of windows, the two input rows are
    // copied into window columns, a padded row or column replaced by the real one beside it in
    // the same window (so the four cells in window order are the real ones in theirs, each once
    // or twice: the same maximum, the same first cell within tolerance); every window is then
    // routed branch-free (the compiler vectorises along W; a row as long as the maps, however
    // they are padded), and each real cell takes the gradients of its copies.
    const int64_t ph = p[1], pw = p[2], iw = in[2], ow = out[2], wb = 2 * ow;
    const bool tiled = ph == 0 && pw == 0 && in[1] == 2 * out[1] && iw == wb;
    const bool covered = 2 * out[1] - ph >= in[1] && wb - pw >= iw;
    const int64_t reach = std::min(iw, wb - pw);  // the real columns some window reads
#pragma omp parallel
    {
      std::vector<float> rows(tiled ? 0 : static_cast<size_t>(4 * wb));
      float *xb0 = rows.data(), *xb1 = xb0 + wb, *gb0 = xb1 + wb, *gb1 = gb0 + wb;
#pragma omp for schedule(static)
      for (int64_t c = 0; c < nc; ++c) {
        const float* xc = x + c * in_sp;
        float* dxc = dx + c * in_sp;
        if (!covered) std::fill(dxc, dxc + in_sp, 0.f);  // cells no window reaches
        for (int64_t o1 = 0; o1 < out[1]; ++o1) {
          const int64_t h = 2 * o1 - ph, top = h < 0 ? h + 1 : h, bottom = h + 1 < in[1] ? h + 1 : h;
          const float* __restrict g = dy + c * out_sp + o1 * ow;
          float *dt = dxc + top * iw, *dbm = dxc + bottom * iw;
          if (tiled) {  // the rows as they are
            const float *__restrict r0 = xc + top * iw, *__restrict r1 = xc + bottom * iw;
            float *__restrict d0 = dt, *__restrict d1 = dbm;
#pragma omp simd
            for (int64_t o2 = 0; o2 < ow; ++o2)
              route_2x2(r0[2 * o2], r0[2 * o2 + 1], r1[2 * o2], r1[2 * o2 + 1], g[o2], tie_rtol, d0[2 * o2],
                        d0[2 * o2 + 1], d1[2 * o2], d1[2 * o2 + 1]);
            continue;
          }
          std::copy(xc + top * iw, xc + top * iw + reach, xb0 + pw);
          std::copy(xc + bottom * iw, xc + bottom * iw + reach, xb1 + pw);
          if (pw) xb0[0] = xb0[1], xb1[0] = xb1[1];  // column -1: column 0 of the same window
          for (int64_t j = reach + pw; j < wb; ++j) xb0[j] = xb0[j - 1], xb1[j] = xb1[j - 1];  // past the maps
#pragma omp simd
          for (int64_t o2 = 0; o2 < ow; ++o2)
            route_2x2(xb0[2 * o2], xb0[2 * o2 + 1], xb1[2 * o2], xb1[2 * o2 + 1], g[o2], tie_rtol, gb0[2 * o2],
                      gb0[2 * o2 + 1], gb1[2 * o2], gb1[2 * o2 + 1]);
          // Back to the real cells: column c is window column c + pw. A copy before its real
          // cell in window order (column -1's, row -1's) may take the gradient: it goes to the
          // real cell; a copy after it (past the maps) never does, the real one coming first.
          if (pw) gb0[1] += gb0[0], gb1[1] += gb1[0];
          if (top == bottom) {
            for (int64_t q = 0; q < reach; ++q) dt[q] = gb0[q + pw] + gb1[q + pw];
          } else {
            std::copy(gb0 + pw, gb0 + pw + reach, dt);
            std::copy(gb1 + pw, gb1 + pw + reach, dbm);
          }
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
          window_cells(w3, o0, o1, o2, cand);
          if (cand.empty()) continue;
          float best = -INFINITY;
          for (int64_t idx : cand) best = std::max(best, xc[idx]);
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
