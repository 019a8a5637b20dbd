// Measures the machine's practical fp32 GEMM peak: OpenBLAS sgemm on square matrices,
// best of several runs. Prints one JSON object. Usage: mosaic_gemm_peak [N] [runs]
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
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
