// Measures the machine's practical fp32 GEMM peak: OpenBLAS sgemm on square matrices,
// best of several runs. Prints one JSON object. Usage: mosaic_gemm_peak [N] [runs]
//
// With --shapes, times instead the single-threaded sgemm shapes im2col's convolutions issue
// on VGG16-CIFAR at batch 64 (one GEMM per thread, each thread on its own matrices, as the
// backend runs them), so that the convolutions' GFLOP/s can be set against what OpenBLAS
// reaches on the same shapes when nothing else (unfolding, col2im, cache misses) is in the
// way. Prints a Markdown table.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/im2col/blas_core.hpp"

namespace {

struct Shape {
  const char* what;
  int m, n, k;
  bool trans_a, trans_b;
};

void time_shapes() {
  // Row-major C[m, n] = op(A) op(B), as ConvKernel::forward / backward call them.
  const Shape shapes[] = {
      {"conv2 forward, one 256-pixel band (W x cols)", 64, 240, 576, false, false},
      {"conv2 forward, a whole image", 64, 900, 576, false, false},
      {"conv2 backward weights (dY cols^T)", 64, 576, 900, false, true},
      {"conv2 backward data (W^T dY)", 576, 900, 64, true, false},
      {"conv4 backward weights", 128, 1152, 196, false, true},
      {"conv4 backward data", 1152, 196, 128, true, false},
  };
  const int threads = omp_get_max_threads(), reps = 100;
  std::printf("| shape | M | N | K | GFLOP/s (%d threads, one GEMM each) |\n|---|---|---|---|---|\n", threads);
  for (const Shape& s : shapes) {
    double best = 1e30;
    for (int r = 0; r < 4; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
      {
        std::vector<float> a(static_cast<size_t>(s.m) * s.k, 0.5f), b(static_cast<size_t>(s.k) * s.n, 0.25f),
            c(static_cast<size_t>(s.m) * s.n, 0.f);
#pragma omp barrier
        for (int i = 0; i < reps; ++i)
          cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.m,
                      s.n, s.k, 1.f, a.data(), s.trans_a ? s.m : s.k, b.data(), s.trans_b ? s.k : s.n, 0.f, c.data(),
                      s.n);
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::min(best, t);  // the first run allocates and warms up
    }
    std::printf("| %s | %d | %d | %d | %.0f |\n", s.what, s.m, s.n, s.k, 2.0 * s.m * s.n * s.k * reps * threads / best / 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  mosaic::im2col_impl::choose_openblas_core();  // the kernels the im2col backend runs
  if (argc > 1 && std::strcmp(argv[1], "--shapes") == 0) {
    time_shapes();
    return 0;
  }
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.f);
  double best = 1e30;
  for (int r = 0; r < runs + 1; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);  // first run warms up
  }
  const double gflops = 2.0 * n * n * n / best / 1e9;
  std::printf("{\"n\": %d, \"seconds\": %.4f, \"gflops\": %.1f}\n", n, best, gflops);
  return c[0] == 0.5f * 0.25f * n ? 0 : 1;
}
