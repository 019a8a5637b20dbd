#include "backends/machine_probe.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/events.hpp"
#if MOSAIC_WITH_IM2COL
#include <cblas.h>

#include "backends/im2col/blas_core.hpp"
#endif
#if MOSAIC_WITH_ONEDNN
#include "backends/onednn/onednn.hpp"
#endif

namespace mosaic {

namespace {

/// Best-of-`runs` GFLOP/s of an n x n x n GEMM `gemm(n, a, b, c)`, after a warm-up run
/// (page faults, thread pools); 0 if it fails.
template <typename Gemm>
double best_gemm_gflops(int n, int runs, Gemm gemm) {
  const size_t size = static_cast<size_t>(n) * n;
  std::vector<float> a(size, 0.5f), b(size, 0.25f), c(size, 0.f);
  double best = 1e30;
  for (int r = 0; r <= runs; ++r) {
    const int64_t t0 = now_ns();
    if (!gemm(n, a.data(), b.data(), c.data())) return 0;
    const double s = static_cast<double>(now_ns() - t0) / 1e9;
    if (r > 0) best = std::min(best, s);
  }
  return 2.0 * n * static_cast<double>(n) * n / best / 1e9;
}

}  // namespace

// A library this build does not have measures 0 (no peak from it).
double probe_sgemm_gflops([[maybe_unused]] int n, [[maybe_unused]] int runs) {
#if MOSAIC_WITH_IM2COL
  im2col_impl::choose_openblas_core();  // the kernels the im2col backend runs
  return best_gemm_gflops(n, runs, [](int m, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1.f, a, m, b, m, 0.f, c, m);
    return true;
  });
#else
  return 0;
#endif
}

double probe_onednn_sgemm_gflops([[maybe_unused]] int n, [[maybe_unused]] int runs) {
#if MOSAIC_WITH_ONEDNN
  return best_gemm_gflops(n, runs, onednn_sgemm);
#else
  return 0;
#endif
}

double probe_bf16_gemm_gflops([[maybe_unused]] int n, [[maybe_unused]] int runs) {
#if MOSAIC_WITH_ONEDNN
  return onednn_bf16_gemm_gflops(n, runs);
#else
  return 0;
#endif
}

long long last_level_cache_bytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
    if (const long bytes = sysconf(name); bytes > 0) return bytes;
  return 0;
}

int memory_probe_mib() {
  constexpr long long kMiB = 1 << 20;
  long long mib = std::max(256LL, (4 * last_level_cache_bytes() + kMiB - 1) / kMiB);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) mib = std::min(mib, std::max(256LL, static_cast<long long>(pages) * page / 8 / kMiB));
  return static_cast<int>(mib);
}

double probe_triad_gbs(int mib, int runs) {
  if (mib <= 0) mib = std::max(1, memory_probe_mib() / 3);
  const int64_t n = static_cast<int64_t>(mib) * (1 << 20) / 4;
  std::vector<float> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // first touch by the threads that use the pages
    a[i] = 0.f;
    b[i] = 1.f;
    c[i] = 2.f;
  }
  double best = 1e30;
  for (int r = 0; r <= runs; ++r) {
    const int64_t t0 = now_ns();
    const float s = 0.5f + static_cast<float>(r);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    const double t = static_cast<double>(now_ns() - t0) / 1e9;
    if (r > 0) best = std::min(best, t);
  }
  return 3.0 * 4 * static_cast<double>(n) / best / 1e9;
}

double probe_read_gbs(int mib, int runs) {
  if (mib <= 0) mib = memory_probe_mib();
  constexpr int64_t kStreams = 8, kLanes = 8;
  const int64_t n = static_cast<int64_t>(mib) * (1 << 20) / 4 / (kStreams * kLanes) * (kStreams * kLanes);
  std::vector<float> a(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<float>(i & 7);
  double best = 1e30, sink = 0;
  int64_t read = 0;  // floats each pass reads (a thread's share, rounded down to whole blocks)
  for (int r = 0; r <= runs; ++r) {
    const int64_t t0 = now_ns();
    double total = 0;
    read = 0;
#pragma omp parallel reduction(+ : total, read)
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t lo = n / nt * t, part = (t + 1 == nt ? n - lo : n / nt) / (kStreams * kLanes) * kLanes;
      const float* base = a.data() + lo;
      read += kStreams * part;
      float acc[kStreams][kLanes] = {};
      for (int64_t j = 0; j < part; j += kLanes)
        for (int64_t s = 0; s < kStreams; ++s)
#pragma omp simd
          for (int64_t l = 0; l < kLanes; ++l) acc[s][l] += base[s * part + j + l];
      for (int64_t s = 0; s < kStreams; ++s)
        for (int64_t l = 0; l < kLanes; ++l) total += acc[s][l];
    }
    const double t = static_cast<double>(now_ns() - t0) / 1e9;
    sink += total;
    if (r > 0) best = std::min(best, t);
  }
  // The sum is used (never 0 here) so that the reads cannot be optimised away.
  return sink != 0 ? 4.0 * static_cast<double>(read) / best / 1e9 : 0;
}

}  // namespace mosaic
