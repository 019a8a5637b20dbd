// A decoder's step at batch 1 multiplies one row by each weight matrix: y[N] = x[K] W[K, N],
// bound by reading W. This times, side by side on the same weights and threads, the ways
// Mosaic's CPU backends could run it, against the machine's read bandwidth measured in the
// same run (backends/machine_probe.hpp):
//
//   sgemm M=1    OpenBLAS's sgemm with one row (what im2col's MatMul ran before)
//   sgemv        OpenBLAS's sgemv over W [K, N] as stored (its transposed product)
//   rows         Mosaic's gemv_rows over W^T [N, K] (a Gemm with transB's layout)
//   panels       Mosaic's gemv_panels over W packed as panels of 8 outputs (common/gemv.hpp)
//
// Every matrix is larger than the last-level cache, so each call streams it from memory;
// the methods alternate, round by round, and the table gives each one's median GB/s. The
// read bandwidth is probed again after every round (the VM's varies by a quarter from one
// minute to the next), and the best of the run is the bar.
//
// With --rows M (2 to 16: a decode step at batch M) the table compares OpenBLAS's sgemm with M
// rows against Mosaic's gemm_panels on the same panels, in the same GB/s of weights read.
//
// usage: mosaic_gemv_layouts [--rounds 7] [--rows M] [--json FILE]
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/common/gemv.hpp"
#include "backends/im2col/blas_core.hpp"
#include "backends/machine_probe.hpp"

namespace {

double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct Case {
  const char* what;
  int64_t k, n;
};

}  // namespace

int main(int argc, char** argv) {
  mosaic::im2col_impl::choose_openblas_core();  // OpenBLAS's sgemm/sgemv on the kernels im2col runs
  int rounds = 7;
  int64_t rows = 1;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else if (a == "--rows" && i + 1 < argc) rows = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: mosaic_gemv_layouts [--rounds 7] [--rows M] [--json FILE]\n");
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "mosaic_gemv_layouts: --rounds must be at least 1\n");
    return 2;
  }
  if (rows < 1 || rows > mosaic::kPanelRowsMax) {
    std::fprintf(stderr, "mosaic_gemv_layouts: --rows must be 1 to %lld\n", static_cast<long long>(mosaic::kPanelRowsMax));
    return 2;
  }
  const Case cases[] = {
      {"GPT-2's LM head [768, 50257]", 768, 50257},
      {"a 1B decoder's MLP up [2048, 8192]", 2048, 8192},
      {"a 1B decoder's MLP down [8192, 2048]", 8192, 2048},
      {"GPT-2's 12 ff1 layers as one [768, 36864]", 768, 36864},
  };
  const int threads = omp_get_max_threads();
  double read_gbs = mosaic::probe_read_gbs();
  const double triad_gbs = mosaic::probe_triad_gbs();
  const std::string header =
      "| weights | sgemm M=1 | sgemv | rows | panels | panels / sgemm | panels, of read bandwidth |\n"
      "|---|---|---|---|---|---|---|\n";
  std::vector<std::array<double, 4>> results;
  std::string rows_json;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (const Case& c : cases) {
    const size_t elems = static_cast<size_t>(c.k * c.n);
    std::vector<float> w(elems), wt(elems), panels(static_cast<size_t>(mosaic::gemv_panel_floats(c.n, c.k)));
    std::vector<float> x(static_cast<size_t>(rows * c.k)), y(static_cast<size_t>(rows * c.n)), want(y.size());
    for (float& v : w) v = u(rng);
    for (float& v : x) v = u(rng);
    for (int64_t kk = 0; kk < c.k; ++kk)
      for (int64_t nn = 0; nn < c.n; ++nn) wt[static_cast<size_t>(nn * c.k + kk)] = w[static_cast<size_t>(kk * c.n + nn)];
    mosaic::pack_gemv_panels(w.data(), false, c.n, c.k, panels.data());
    const auto sgemm = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), c.n, c.k, 1.f, x.data(), c.k, w.data(),
                  c.n, 0.f, y.data(), c.n);
    };
    const std::vector<std::function<void()>> methods =
        rows == 1 ? std::vector<std::function<void()>>{
                        sgemm,
                        [&] { cblas_sgemv(CblasRowMajor, CblasTrans, c.k, c.n, 1.f, w.data(), c.n, x.data(), 1, 0.f, y.data(), 1); },
                        [&] { mosaic::gemv_rows(wt.data(), x.data(), y.data(), c.n, c.k, 1.f); },
                        [&] { mosaic::gemv_panels(panels.data(), x.data(), y.data(), c.n, c.k, 1.f); }}
                  : std::vector<std::function<void()>>{
                        sgemm, [&] { mosaic::gemm_panels(panels.data(), x.data(), c.k, y.data(), c.n, rows, c.n, c.k, 1.f); }};
    const int kMethods = static_cast<int>(methods.size());
    std::vector<std::vector<double>> t(static_cast<size_t>(kMethods));
    double worst = 0;
    for (int m = 0; m < kMethods; ++m) {  // warm-up, and each method's result against the first's
      methods[m]();
      if (m == 0) want = y;
      for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(y[i] - want[i])));
    }
    for (int r = 0; r < rounds; ++r) {
      for (int m = 0; m < kMethods; ++m) t[m].push_back(seconds(methods[m]));
      read_gbs = std::max(read_gbs, mosaic::probe_read_gbs(0, 2));
    }
    double gbs[4] = {0, 0, 0, 0};
    for (int m = 0; m < kMethods; ++m) gbs[m] = 4.0 * static_cast<double>(elems) / median(t[m]) / 1e9;
    if (rows > 1) std::swap(gbs[1], gbs[3]);  // sgemm and panels in the columns of theirs
    results.push_back({gbs[0], gbs[1], gbs[2], gbs[3]});
    if (worst > 1e-3 * std::sqrt(static_cast<double>(c.k))) {
      std::fprintf(stderr, "mosaic_gemv_layouts: the methods disagree by %.3g on %s\n", worst, c.what);
      return 1;
    }
    char row[512];
    if (rows > 1)
      std::snprintf(row, sizeof row, "%s{\"weights\": \"%s\", \"k\": %lld, \"n\": %lld, \"sgemm_gbs\": %.2f, \"panels_gbs\": %.2f}",
                    rows_json.empty() ? "" : ",\n    ", c.what, static_cast<long long>(c.k), static_cast<long long>(c.n),
                    gbs[0], gbs[3]);
    else
      std::snprintf(row, sizeof row,
                  "%s{\"weights\": \"%s\", \"k\": %lld, \"n\": %lld, \"sgemm_gbs\": %.2f, \"sgemv_gbs\": %.2f, "
                  "\"rows_gbs\": %.2f, \"panels_gbs\": %.2f}",
                  rows_json.empty() ? "" : ",\n    ", c.what, static_cast<long long>(c.k), static_cast<long long>(c.n),
                  gbs[0], gbs[1], gbs[2], gbs[3]);
    rows_json += row;
  }
  const std::string few_rows_header = "| weights | sgemm M=" + std::to_string(rows) +
                                      " | panels | panels / sgemm | panels, of read bandwidth |\n|---|---|---|---|---|\n";
  std::printf("threads %d, %lld row(s); the machine's read bandwidth %.1f GB/s (best of the run; triad %.1f), medians of "
              "%d alternating rounds\n\n%s",
              threads, static_cast<long long>(rows), read_gbs, triad_gbs, rounds,
              (rows > 1 ? few_rows_header : header).c_str());
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& g = results[i];
    if (rows > 1)
      std::printf("| %s | %.1f GB/s | %.1f | %.2fx | %.0f%% |\n", cases[i].what, g[0], g[3], g[3] / g[0], 100 * g[3] / read_gbs);
    else
      std::printf("| %s | %.1f GB/s | %.1f | %.1f | %.1f | %.2fx | %.0f%% |\n", cases[i].what, g[0], g[1], g[2], g[3],
                  g[3] / g[0], 100 * g[3] / read_gbs);
  }
  if (!json.empty()) {
    std::ofstream f(json);
    f << "{\n  \"threads\": " << threads << ",\n  \"rows\": " << rows << ",\n  \"rounds\": " << rounds << ",\n  \"read_bandwidth_gbs\": " << read_gbs
      << ",\n  \"triad_bandwidth_gbs\": " << triad_gbs << ",\n  \"cases\": [\n    " << rows_json << "\n  ]\n}\n";
    if (!f) {
      std::fprintf(stderr, "mosaic_gemv_layouts: cannot write %s\n", json.c_str());
      return 1;
    }
  }
  return 0;
}
