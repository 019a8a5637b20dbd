#include "backends/common/gemv.hpp"

#include <algorithm>
#include <cstring>
#include <omp.h>

namespace mosaic {

namespace {
/// Eight floats as one value (GCC's and Clang's vector extension): AVX2 registers with
/// -march=native, pairs of SSE registers without.
typedef float Float8 __attribute__((vector_size(32)));
inline Float8 load8(const float* p) {
  Float8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, Float8 v) { std::memcpy(p, &v, sizeof v); }

/// A full block of C, 4 rows by 16 columns, in eight vector accumulators; each row of B's
/// block is loaded once for the four rows.
void small_gemm_4x16(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  Float8 acc[4][2] = {};
  for (int64_t p = 0; p < k; ++p) {
    const Float8 b0 = load8(b + p * ldb), b1 = load8(b + p * ldb + 8);
    for (int r = 0; r < 4; ++r) {
      const float av = a[r * lda + p];
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int r = 0; r < 4; ++r) {
    store8(c + r * ldc, acc[r][0]);
    store8(c + r * ldc + 8, acc[r][1]);
  }
}

/// The edges: `rows` rows and `width` columns of C, one row at a time.
void small_gemm_edge(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                     int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    for (int64_t t = 0; t < width; ++t) cr[t] = 0.f;
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[r * lda + p];
      for (int64_t t = 0; t < width; ++t) cr[t] += av * b[p * ldb + t];
    }
  }
}
}  // namespace

void small_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                int64_t ldc) {
  const int64_t m4 = m / 4 * 4, n16 = n / 16 * 16;
  for (int64_t i = 0; i < m4; i += 4)
    for (int64_t j = 0; j < n16; j += 16) small_gemm_4x16(k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc);
  if (n16 < n) small_gemm_edge(k, a, lda, b + n16, ldb, c + n16, ldc, m4, n - n16);
  if (m4 < m) small_gemm_edge(k, a + m4 * lda, lda, b, ldb, c + m4 * ldc, ldc, m - m4, n);
}

void gemv_rows(const float* w, const float* x, float* y, int64_t n, int64_t k, float alpha) {
  constexpr int64_t kRows = 4, kLanes = 16;
  const int64_t kv = k / kLanes * kLanes;
  // Four rows at a time share each load of x; 16 partial sums per row keep the FMAs
  // independent (the compiler vectorises the lane loop), summed once at the end.
#pragma omp parallel for schedule(static) if (n * k >= (1 << 16))
  for (int64_t r = 0; r < n; r += kRows) {
    const int64_t rows = std::min(kRows, n - r);
    float acc[kRows][kLanes] = {};
    if (rows == kRows) {
      const float *w0 = w + r * k, *w1 = w0 + k, *w2 = w1 + k, *w3 = w2 + k;
      for (int64_t j = 0; j < kv; j += kLanes) {
#pragma omp simd
        for (int64_t l = 0; l < kLanes; ++l) {
          const float xv = x[j + l];
          acc[0][l] += w0[j + l] * xv;
          acc[1][l] += w1[j + l] * xv;
          acc[2][l] += w2[j + l] * xv;
          acc[3][l] += w3[j + l] * xv;
        }
      }
    } else {
      for (int64_t i = 0; i < rows; ++i) {
        const float* wi = w + (r + i) * k;
        for (int64_t j = 0; j < kv; j += kLanes)
#pragma omp simd
          for (int64_t l = 0; l < kLanes; ++l) acc[i][l] += wi[j + l] * x[j + l];
      }
    }
    for (int64_t i = 0; i < rows; ++i) {
      const float* wi = w + (r + i) * k;
      float s = 0.f;
      for (int64_t l = 0; l < kLanes; ++l) s += acc[i][l];
      for (int64_t j = kv; j < k; ++j) s += wi[j] * x[j];
      y[r + i] = alpha * s;
    }
  }
}

int64_t gemv_panel_floats(int64_t n, int64_t k) { return (n + kGemvPanel - 1) / kGemvPanel * kGemvPanel * k; }

void pack_gemv_panels(const float* b, bool trans_b, int64_t n, int64_t k, float* panels) {
  const int64_t np = (n + kGemvPanel - 1) / kGemvPanel;
#pragma omp parallel for schedule(static) if (n * k >= (1 << 16))
  for (int64_t q = 0; q < np; ++q) {
    float* dst = panels + q * k * kGemvPanel;
    const int64_t width = std::min(kGemvPanel, n - q * kGemvPanel);
    for (int64_t kk = 0; kk < k; ++kk) {
      float* d = dst + kk * kGemvPanel;
      for (int64_t l = 0; l < width; ++l) {
        const int64_t col = q * kGemvPanel + l;
        d[l] = trans_b ? b[col * k + kk] : b[kk * n + col];
      }
      for (int64_t l = width; l < kGemvPanel; ++l) d[l] = 0.f;
    }
  }
}

void gemv_panels(const float* panels, const float* x, float* y, int64_t n, int64_t k, float alpha) {
  static_assert(kGemvPanel == 8, "one Float8 per panel row");
  constexpr int kStreams = 8;
  const int64_t np = (n + kGemvPanel - 1) / kGemvPanel;
#pragma omp parallel if (n * k >= (1 << 16))
  {
    // This thread's share of the panels, contiguous, read as kStreams sequential streams
    // (panel i of each of kStreams equal parts, side by side): one stream per thread leaves
    // the memory system idle between misses; eight read GPT-2's head 1.4x faster than rows
    // of 3 KB (bench/gemv_layouts.cpp).
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t first = np * t / nt, count = np * (t + 1) / nt - first;
    const int64_t per = (count + kStreams - 1) / kStreams;
    for (int64_t i = 0; i < per; ++i) {
      const float* src[kStreams];
      int live = 0;
      int64_t which[kStreams];
      for (int s = 0; s < kStreams; ++s)
        if (s * per + i < count) {
          which[live] = first + s * per + i;
          src[live] = panels + which[live] * k * kGemvPanel;
          ++live;
        }
      Float8 acc[kStreams] = {};
      if (live == kStreams) {
        for (int64_t kk = 0; kk < k; ++kk) {
          const Float8 xv = x[kk] - Float8{};
          for (int s = 0; s < kStreams; ++s) acc[s] += load8(src[s] + kk * kGemvPanel) * xv;
        }
      } else {
        for (int64_t kk = 0; kk < k; ++kk) {
          const Float8 xv = x[kk] - Float8{};
          for (int s = 0; s < live; ++s) acc[s] += load8(src[s] + kk * kGemvPanel) * xv;
        }
      }
      for (int s = 0; s < live; ++s) {
        float out[kGemvPanel];
        store8(out, acc[s] * alpha);
        const int64_t col = which[s] * kGemvPanel, width = std::min(kGemvPanel, n - col);
        std::memcpy(y + col, out, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
}

bool RowGemv::init(const KernelContext& ctx, const GemmParams& p) {
  active_ = false;
  if (p.m != 1 || ctx.training || ctx.precision != Precision::kF32) return false;
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32) return false;
  if (const Tensor* b = ctx.constant(1)) {
    packed_ = Tensor::empty(TensorDesc{DType::kF32, {gemv_panel_floats(p.n, p.k)}}, ctx.tracker);
    pack_gemv_panels(b->f32(), p.trans_b, p.n, p.k, packed_.f32());
  } else if (!p.trans_b) {
    return false;  // a run-time [K, N] B would be read down its columns
  }
  p_ = p;
  c_elems_ = p.has_c && p.beta != 0.f ? ctx.inputs[2].numel() : 0;
  act_ = fused_activation(*ctx.node);
  active_ = true;
  return true;
}

bool RowGemv::init_matmul(const KernelContext& ctx, const MatMulParams& p) {
  if (shape_numel(p.batch) * p.m != 1 || shape_numel(p.b_batch) != 1) return false;
  GemmParams g;
  g.m = 1;
  g.n = p.n;
  g.k = p.k;
  g.beta = 0.f;
  return init(ctx, g);
}

void RowGemv::run(const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y) const {
  float* out = y.f32();
  // A is [1, K] or its transpose [K, 1]: K contiguous floats either way.
  if (packed_.defined()) gemv_panels(packed_.f32(), a.f32(), out, p_.n, p_.k, p_.alpha);
  else gemv_rows(b.f32(), a.f32(), out, p_.n, p_.k, p_.alpha);
  if (c_elems_) {
    const float* cv = c->f32();
    // C broadcasts to [1, N]: a scalar, [N], [1, N] (or [1, 1]).
    if (c_elems_ == 1)
      for (int64_t i = 0; i < p_.n; ++i) out[i] += p_.beta * cv[0];
    else
      for (int64_t i = 0; i < p_.n; ++i) out[i] += p_.beta * cv[i];
  }
  act_.apply(out, p_.n);
}

}  // namespace mosaic
