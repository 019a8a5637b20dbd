#include "backends/common/gemv.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include <omp.h>

#include "ir/elements.hpp"
#include "ir/splitmix.hpp"

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

/// One panel row as one value: a zmm register with AVX-512, a ymm one with AVX2.
typedef float FloatP __attribute__((vector_size(kGemvPanel * sizeof(float))));
inline FloatP loadp(const float* p) {
  FloatP v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storep(float* p, FloatP v) { std::memcpy(p, &v, sizeof v); }
/// A panel row of bfloat16 weights (their bits) widened to floats: a bfloat16 is the high half
/// of a float, so each one is zero-extended and shifted up (vpmovzxwd, vpslld).
typedef uint16_t HalfP __attribute__((vector_size(kGemvPanel * sizeof(uint16_t))));
typedef uint32_t WordP __attribute__((vector_size(kGemvPanel * sizeof(uint32_t))));
inline FloatP loadp(const uint16_t* p) {
  HalfP h;
  std::memcpy(&h, p, sizeof h);
  const WordP w = __builtin_convertvector(h, WordP) << 16;
  FloatP v;
  std::memcpy(&v, &w, sizeof v);
  return v;
}
inline float to_panel(float v, float) { return v; }
inline uint16_t to_panel(float v, uint16_t) { return f32_to_bf16(v); }

/// Panel rows of float32 ahead of the one read that the panel loops ask the memory for (4 KB on
/// AVX-512); of a narrower element type as many bytes ahead.
constexpr int64_t kPanelPrefetchRows = 64;
template <typename P>
constexpr int64_t prefetch_rows() {
  return kPanelPrefetchRows * static_cast<int64_t>(sizeof(float) / sizeof(P));
}

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

namespace {
template <typename P>
void pack_panels(const float* b, bool trans_b, int64_t n, int64_t k, P* panels) {
  const int64_t np = (n + kGemvPanel - 1) / kGemvPanel;
#pragma omp parallel for schedule(static) if (n * k >= (1 << 16))
  for (int64_t q = 0; q < np; ++q) {
    P* dst = panels + q * k * kGemvPanel;
    const int64_t width = std::min(kGemvPanel, n - q * kGemvPanel);
    for (int64_t kk = 0; kk < k; ++kk) {
      P* d = dst + kk * kGemvPanel;
      for (int64_t l = 0; l < width; ++l) {
        const int64_t col = q * kGemvPanel + l;
        d[l] = to_panel(trans_b ? b[col * k + kk] : b[kk * n + col], P{});
      }
      for (int64_t l = width; l < kGemvPanel; ++l) d[l] = P{};
    }
  }
}
}  // namespace

void pack_gemv_panels(const float* b, bool trans_b, int64_t n, int64_t k, float* panels) {
  pack_panels(b, trans_b, n, k, panels);
}

void pack_gemv_panels_bf16(const float* b, bool trans_b, int64_t n, int64_t k, uint16_t* panels) {
  pack_panels(b, trans_b, n, k, panels);
}

namespace {
template <typename P>
void gemv_panels_of(const P* panels, const float* x, float* y, int64_t n, int64_t k, float alpha) {
  // Float32 panels of 16 outputs (AVX-512): four streams a thread, prefetched 4 KB ahead, read
  // a 1B decoder's step 1.04x faster than eight unprefetched (8 alternating rounds; GPT-2
  // small's 1.03x; docs/generation.md). The AVX2 layout and bfloat16 keep eight.
  constexpr bool kFour = sizeof(P) == sizeof(float) && kGemvPanel == 16;
  constexpr int kStreams = kFour ? 4 : 8;
  const int64_t np = (n + kGemvPanel - 1) / kGemvPanel;
#pragma omp parallel if (n * k >= (1 << 16))
  {
    // This thread's share of the panels, contiguous, read as kStreams sequential streams
    // (panel i of each of kStreams equal parts, side by side): one stream per thread leaves
    // the memory system idle between misses; eight read GPT-2's head 1.4x faster than rows
    // of 3 KB (bench/gemv_layouts.cpp), four prefetched a little faster again (above).
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t first = np * t / nt, count = np * (t + 1) / nt - first;
    const int64_t per = (count + kStreams - 1) / kStreams;
    for (int64_t i = 0; i < per; ++i) {
      const P* src[kStreams];
      int live = 0;
      int64_t which[kStreams];
      for (int s = 0; s < kStreams; ++s)
        if (s * per + i < count) {
          which[live] = first + s * per + i;
          src[live] = panels + which[live] * k * kGemvPanel;
          ++live;
        }
      FloatP acc[kStreams] = {};
      if (live == kStreams) {
        for (int64_t kk = 0; kk < k; ++kk) {
          const FloatP xv = x[kk] - FloatP{};
          // Asked for 4 KB ahead, as gemm_panels does: bfloat16's eight streams (a 1B decoder's
          // bf16 step 116 -> 103 ms), float32's four (the eight were unchanged by it, 1.00x).
          if constexpr (kFour || sizeof(P) != sizeof(float))
            for (int s = 0; s < kStreams; ++s) __builtin_prefetch(src[s] + (kk + prefetch_rows<P>()) * kGemvPanel);
          for (int s = 0; s < kStreams; ++s) acc[s] += loadp(src[s] + kk * kGemvPanel) * xv;
        }
      } else {
        for (int64_t kk = 0; kk < k; ++kk) {
          const FloatP xv = x[kk] - FloatP{};
          for (int s = 0; s < live; ++s) acc[s] += loadp(src[s] + kk * kGemvPanel) * xv;
        }
      }
      for (int s = 0; s < live; ++s) {
        float out[kGemvPanel];
        storep(out, acc[s] * alpha);
        const int64_t col = which[s] * kGemvPanel, width = std::min(kGemvPanel, n - col);
        std::memcpy(y + col, out, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
}

}  // namespace

void gemv_panels(const float* panels, const float* x, float* y, int64_t n, int64_t k, float alpha) {
  gemv_panels_of(panels, x, y, n, k, alpha);
}

void gemv_panels_bf16(const uint16_t* panels, const float* x, float* y, int64_t n, int64_t k, float alpha) {
  gemv_panels_of(panels, x, y, n, k, alpha);
}

namespace {
/// Panels each thread reads side by side in gemm_panels (a stream each): 3 read 1.1-1.2x the
/// memory's rate of 2 at batch 8 in the same standalone test.
constexpr int kPanelStreams = 3;

/// Rows r .. r + R of Y for the S panels `src` (each [k][kGemvPanel]): every panel row loaded
/// once for the R rows of A, R * S accumulators (at most 24 of AVX-512's 32 registers, 12 of
/// AVX2's 16).
template <int R, int S, typename P>
void panel_block(const P* const* src, const int64_t* which, const float* a, int64_t lda, float* y, int64_t ldy,
                 int64_t n, int64_t k, float alpha) {
  FloatP acc[S][R] = {};
  for (int64_t kk = 0; kk < k; ++kk) {
    FloatP w[S];
    // The hardware's prefetchers stop at each 4 KB page of a stream; asking for the row
    // kPanelPrefetchRows ahead keeps the memory busy: at batch 8 on the AMX Xeon 75-80 ->
    // 101-113 GFLOP/s, on its AVX2 path 55 -> 62-66 (a standalone copy of this loop over 768 MB
    // of panels, alternating; docs/generation.md). Past the panel's end it is a hint, not a load.
    for (int s = 0; s < S; ++s) __builtin_prefetch(src[s] + (kk + prefetch_rows<P>()) * kGemvPanel);
    for (int s = 0; s < S; ++s) {
      w[s] = loadp(src[s] + kk * kGemvPanel);
      // Kept in a register: GCC folds it into each row's FMA as a memory operand, loading the
      // panel row R times, and the loads, not the FMAs, bound the loop (4 rows in cache on one
      // core: 33 GFLOP/s folded, 66 in a register). Without AVX, a panel row is two SSE registers.
#if defined(__AVX512F__)
      asm("" : "+v"(w[s]));
#elif defined(__AVX__)
      asm("" : "+x"(w[s]));
#endif
    }
    for (int r = 0; r < R; ++r) {
      const FloatP av = a[r * lda + kk] - FloatP{};
      for (int s = 0; s < S; ++s) acc[s][r] += w[s] * av;
    }
  }
  for (int s = 0; s < S; ++s) {
    const int64_t col = which[s] * kGemvPanel, width = std::min(kGemvPanel, n - col);
    for (int r = 0; r < R; ++r) {
      float out[kGemvPanel];
      storep(out, acc[s][r] * alpha);
      std::memcpy(y + r * ldy + col, out, static_cast<size_t>(width) * sizeof(float));
    }
  }
}

template <int S, typename P>
void panel_rows(int64_t rows, const P* const* src, const int64_t* which, const float* a, int64_t lda, float* y,
                int64_t ldy, int64_t n, int64_t k, float alpha) {
  static_assert(kPanelRowsPerPass == 4 || kPanelRowsPerPass == 8, "a case per row count below");
  switch (rows) {
    case 1: return panel_block<1, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
    case 2: return panel_block<2, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
    case 3: return panel_block<3, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
#if defined(__AVX512F__)
    case 4: return panel_block<4, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
    case 5: return panel_block<5, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
    case 6: return panel_block<6, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
    case 7: return panel_block<7, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
#endif
    default: return panel_block<kPanelRowsPerPass, S, P>(src, which, a, lda, y, ldy, n, k, alpha);
  }
}

template <typename P>
void gemm_panels_of(const P* panels, const float* a, int64_t lda, float* y, int64_t ldy, int64_t m, int64_t n,
                    int64_t k, float alpha) {
  const int64_t np = (n + kGemvPanel - 1) / kGemvPanel;
#pragma omp parallel if (m * n * k >= (1 << 16))
  {
    // This thread's panels, contiguous, as kPanelStreams streams (equal parts side by side);
    // for each group of panels, the rows of A kPanelRowsPerPass at a time, the group re-read
    // from the cache after the first pass.
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t first = np * t / nt, count = np * (t + 1) / nt - first;
    const int64_t per = (count + kPanelStreams - 1) / kPanelStreams;
    for (int64_t i = 0; i < per; ++i) {
      int64_t which[kPanelStreams];
      const P* src[kPanelStreams];
      int live = 0;
      for (int s = 0; s < kPanelStreams; ++s)
        if (s * per + i < count) {
          which[live] = first + s * per + i;
          src[live] = panels + which[live] * k * kGemvPanel;
          ++live;
        }
      for (int64_t r = 0; r < m; r += kPanelRowsPerPass) {
        const int64_t rows = std::min<int64_t>(kPanelRowsPerPass, m - r);
        const float* ar = a + r * lda;
        float* yr = y + r * ldy;
        static_assert(kPanelStreams == 3, "a case per live stream count below");
        if (live == 3) panel_rows<3>(rows, src, which, ar, lda, yr, ldy, n, k, alpha);
        else if (live == 2) panel_rows<2>(rows, src, which, ar, lda, yr, ldy, n, k, alpha);
        else panel_rows<1>(rows, src, which, ar, lda, yr, ldy, n, k, alpha);
      }
    }
  }
}
}  // namespace

void gemm_panels(const float* panels, const float* a, int64_t lda, float* y, int64_t ldy, int64_t m, int64_t n,
                 int64_t k, float alpha) {
  gemm_panels_of(panels, a, lda, y, ldy, m, n, k, alpha);
}

void gemm_panels_bf16(const uint16_t* panels, const float* a, int64_t lda, float* y, int64_t ldy, int64_t m, int64_t n,
                      int64_t k, float alpha) {
  gemm_panels_of(panels, a, lda, y, ldy, m, n, k, alpha);
}

namespace {
/// A hash of n floats' bits and places, at about the memory's rate (32 bytes per mix).
uint64_t content_hash(const float* p, int64_t n) {
  const int64_t blocks = n / 8;
  uint64_t h = splitmix64(static_cast<uint64_t>(n));
#pragma omp parallel for reduction(^ : h) schedule(static) if (n >= (1 << 18))
  for (int64_t i = 0; i < blocks; ++i) {
    uint64_t w[4];
    std::memcpy(w, p + 8 * i, sizeof w);
    h ^= splitmix64((w[0] ^ (w[1] << 17 | w[1] >> 47)) + (w[2] ^ (w[3] << 31 | w[3] >> 33)) * 0x9e3779b97f4a7c15ull +
               static_cast<uint64_t>(i));
  }
  for (int64_t i = blocks * 8; i < n; ++i) {
    uint32_t v;
    std::memcpy(&v, p + i, sizeof v);
    h ^= splitmix64(v ^ (static_cast<uint64_t>(i) << 32));
  }
  return h;
}
}  // namespace

std::shared_ptr<const Tensor> shared_gemv_panels(const Tensor& b, bool trans_b, int64_t n, int64_t k, DType type) {
  struct Packed {
    std::shared_ptr<Buffer> source;  ///< pinned: its address cannot be reused while the panels live
    uint64_t hash = 0;               ///< of the weights packed
    Tensor panels;
  };
  struct Key {
    const void* data;
    bool trans_b;
    int64_t n, k;
    DType type;
    bool operator<(const Key& o) const {
      return std::tie(data, trans_b, n, k, type) < std::tie(o.data, o.trans_b, o.n, o.k, o.type);
    }
  };
  static std::mutex mutex;
  static std::map<Key, std::weak_ptr<Packed>> cache;
  const Key key{b.data(), trans_b, n, k, type};
  // The weights' contents, checked on every hit: a buffer written in place since it was packed
  // (no inference plan does, but nothing else may then reuse stale panels) is packed anew.
  const uint64_t hash = content_hash(b.f32(), n * k);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end())
    if (std::shared_ptr<Packed> hit = it->second.lock(); hit && hit->hash == hash)
      return std::shared_ptr<const Tensor>(hit, &hit->panels);
  for (auto it = cache.begin(); it != cache.end();) it = it->second.expired() ? cache.erase(it) : std::next(it);
  auto packed = std::make_shared<Packed>();
  packed->source = b.buffer();
  packed->hash = hash;
  // Untracked: the panels may outlive the plan that packed them (its MemoryTracker); each
  // kernel reports them as its workspace instead.
  packed->panels = Tensor::empty(TensorDesc{type, {gemv_panel_floats(n, k)}});
  if (type == DType::kBF16) pack_gemv_panels_bf16(b.f32(), trans_b, n, k, static_cast<uint16_t*>(packed->panels.data()));
  else pack_gemv_panels(b.f32(), trans_b, n, k, packed->panels.f32());
  cache[key] = packed;
  return std::shared_ptr<const Tensor>(packed, &packed->panels);
}

bool RowGemv::init(const KernelContext& ctx, const GemmParams& p) {
  active_ = false;
  if (p.m < 1 || p.m > kPanelRowsMax || ctx.training) return false;
  if (ctx.precision != Precision::kF32 && ctx.precision != Precision::kBF16) return false;
  bf16_ = ctx.precision == Precision::kBF16;
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32) return false;
  c_elems_ = p.has_c && p.beta != 0.f ? ctx.inputs[2].numel() : 0;
  const Tensor* b = ctx.constant(1);
  if (p.m > 1) {  // rows of A [M, K] in place, a constant B, a C that every row shares
    if (p.trans_a || !b) return false;
    if (c_elems_ > 1 && (c_elems_ != p.n || ctx.inputs[2].shape.back() != p.n)) return false;
  }
  if (b) packed_ = shared_gemv_panels(*b, p.trans_b, p.n, p.k, bf16_ ? DType::kBF16 : DType::kF32);
  else if (!p.trans_b || bf16_) return false;  // a run-time [K, N] B would be read down its columns
  p_ = p;
  if (bf16_) a16_.assign(static_cast<size_t>(p.m * p.k), 0.f);
  act_ = fused_activation(*ctx.node);
  active_ = true;
  return true;
}

bool RowGemv::init_matmul(const KernelContext& ctx, const MatMulParams& p) {
  // Every row of A against one B: A's batches are rows of one [rows, K] matrix (A must not be
  // broadcast, so that its rows lie one after another).
  const int64_t rows = shape_numel(p.batch) * p.m;
  if (rows > kPanelRowsMax || shape_numel(p.b_batch) != 1 || (rows > 1 && p.a_batch != p.batch)) return false;
  GemmParams g;
  g.m = rows;
  g.n = p.n;
  g.k = p.k;
  g.beta = 0.f;
  return init(ctx, g);
}

void RowGemv::run(const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y) const {
  float* out = y.f32();
  const int64_t m = p_.m, n = p_.n;
  // One row: A is [1, K] or its transpose [K, 1], K contiguous floats either way.
  if (bf16_) {
    // bfloat16 inputs and weights, float32 sums (as oneDNN's bf16 products): A's rows rounded
    // to bfloat16 first, so that the result is the float32 product of the rounded operands.
    const float* src = a.f32();
    const int64_t count = m * p_.k;  // a16_'s size, set at init
    for (int64_t i = 0; i < count; ++i) a16_[static_cast<size_t>(i)] = bf16_to_f32(f32_to_bf16(src[i]));
    const auto* panels = static_cast<const uint16_t*>(packed_->data());
    if (m > 1) gemm_panels_bf16(panels, a16_.data(), p_.k, out, n, m, n, p_.k, p_.alpha);
    else gemv_panels_bf16(panels, a16_.data(), out, n, p_.k, p_.alpha);
  } else if (m > 1) gemm_panels(packed_->f32(), a.f32(), p_.k, out, n, m, n, p_.k, p_.alpha);
  else if (packed_) gemv_panels(packed_->f32(), a.f32(), out, n, p_.k, p_.alpha);
  else gemv_rows(b.f32(), a.f32(), out, n, p_.k, p_.alpha);
  if (c_elems_) {
    const float* cv = c->f32();
    // C broadcasts to [M, N]: a scalar, [N], [1, N] (or [1, 1]).
    for (int64_t r = 0; r < m; ++r) {
      float* row = out + r * n;
      if (c_elems_ == 1)
        for (int64_t i = 0; i < n; ++i) row[i] += p_.beta * cv[0];
      else
        for (int64_t i = 0; i < n; ++i) row[i] += p_.beta * cv[i];
    }
  }
  act_.apply(out, m * n);
}

}  // namespace mosaic
