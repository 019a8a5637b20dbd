// Timing statistics against hand-computed values and a coverage simulation; the benchmark's
// raw samples, adaptive and minimum-duration modes end to end.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <map>
#include <random>
#include <sstream>

#include "backends/machine_probe.hpp"
#include "metrics/peaks.hpp"
#include "metrics/report.hpp"
#include "metrics/stats.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

TEST(Stats, QuantilesAreHyndmanFanType7) {
  const std::vector<double> s{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.25), 1.75);  // numpy.quantile([1,2,3,4], 0.25)
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 0.9), 3.7);
  EXPECT_DOUBLE_EQ(quantile_sorted(s, 1.0), 4);
  EXPECT_DOUBLE_EQ(quantile_sorted({7}, 0.99), 7);
}

TEST(Stats, MedianCiRanksMatchTheBinomialTable) {
  // Coverage of [x_(j), x_(n-j+1)] is 1 - 2 P(Bin(n, 1/2) <= j-1), computed by hand.
  auto r = median_ci_ranks(10);
  EXPECT_EQ(r.lo, 2u);
  EXPECT_EQ(r.hi, 9u);
  EXPECT_NEAR(r.coverage, 1 - 2 * 11.0 / 1024, 1e-12);
  r = median_ci_ranks(6);
  EXPECT_EQ(r.lo, 1u);
  EXPECT_EQ(r.hi, 6u);
  EXPECT_NEAR(r.coverage, 1 - 2.0 / 64, 1e-12);
  EXPECT_EQ(median_ci_ranks(5).lo, 0u);  // 1 - 2/32 = 0.9375 < 0.95: no interval
  r = median_ci_ranks(100);  // the textbook ranks for n = 100
  EXPECT_EQ(r.lo, 40u);
  EXPECT_EQ(r.hi, 61u);
  EXPECT_GE(r.coverage, 0.95);
  EXPECT_LT(median_ci_ranks(100000).coverage, 0.96);  // large n: close to 95%, no underflow
  EXPECT_GT(median_ci_ranks(100000).lo, 49000u);
}

TEST(Stats, DescribeHandComputed) {
  SampleStats s = describe({4, 1, 3, 2, 100});
  EXPECT_EQ(s.n, 5u);
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 100);
  EXPECT_DOUBLE_EQ(s.mean, 22);
  EXPECT_DOUBLE_EQ(s.q1, 2);
  EXPECT_DOUBLE_EQ(s.q3, 4);
  EXPECT_EQ(s.outliers, 1);       // 100 > q3 + 1.5 * iqr = 7
  EXPECT_TRUE(s.noisy);           // 1 of 5 is over 10%
  EXPECT_FALSE(s.ci_low.has_value());  // n = 5: too small for a 95% interval
  EXPECT_FALSE(s.rel_ci_half_width().has_value());
  EXPECT_EQ(describe({}).n, 0u);

  std::vector<double> steady(50, 10.0);
  steady[3] = 10.2;
  s = describe(steady);
  EXPECT_DOUBLE_EQ(*s.ci_low, 10);
  EXPECT_DOUBLE_EQ(*s.ci_high, 10);
  EXPECT_FALSE(s.noisy);
}

TEST(Stats, MedianCiCoversTheTrueMedianAtLeast95PercentOfTheTime) {
  // Exponential timings (skewed, as run times are): true median ln 2.
  std::mt19937_64 rng(7);
  std::exponential_distribution<double> d(1.0);
  for (size_t n : {8, 30, 200}) {
    int covered = 0;
    const int trials = 4000;
    for (int t = 0; t < trials; ++t) {
      std::vector<double> v(n);
      for (auto& x : v) x = d(rng);
      const SampleStats s = describe(v);
      covered += *s.ci_low <= std::log(2.0) && std::log(2.0) <= *s.ci_high;
    }
    // The exact coverage is >= 0.95; 4000 trials put 3 sigma at about 1 point.
    EXPECT_GE(covered, 0.94 * trials) << "n = " << n;
  }
}

TEST(BenchStats, JsonKeepsEverySampleAndItsStatistics) {
  const std::string json = ::testing::TempDir() + "stats.json";
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 2 --backends im2col --warmup 1 --iterations 7 --repeats 2 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  for (const char* s : {"timing:  median 95% CI", "repeats:", "coverage: per-node times account for"})
    EXPECT_NE(b.out.find(s), std::string::npos) << s << "\n" << b.out;
  const auto j = read_json(json);
  EXPECT_EQ(j["schema"], "mosaic.bench/2");
  const auto& r = j["runs"][0];
  ASSERT_EQ(r["samples"]["iteration_ms"].size(), 14u);
  ASSERT_EQ(r["samples"]["repeat"].size(), 14u);
  EXPECT_EQ(r["samples"]["repeat"][13], 1);
  std::vector<double> it = r["samples"]["iteration_ms"];
  EXPECT_NEAR(r["iteration_ms"]["median"].get<double>(), describe(it).median, 1e-9);
  EXPECT_NEAR(r["summary"]["median_ms"].get<double>(), describe(it).median, 1e-9);
  EXPECT_EQ(r["iteration_ms"]["n"], 14);
  EXPECT_EQ(r["summary"]["repeat_images_per_s"].size(), 2u);
  const double coverage = r["summary"]["node_coverage"];
  EXPECT_GT(coverage, 0.5);
  EXPECT_LE(coverage, 1.001);
  for (const auto& n : r["nodes"]) {
    if (n["view"]) continue;
    ASSERT_EQ(n["samples_us"].size(), 14u) << n["name"];
    std::vector<double> s = n["samples_us"];
    EXPECT_NEAR(n["median_us"].get<double>(), describe(s).median, 1e-9);
    EXPECT_TRUE(n["backward_us"].is_null());  // inference: no backward figure, null not 0
  }
}

TEST(BenchStats, AdaptiveStopsAtItsCapOrTarget) {
  const std::string json = ::testing::TempDir() + "adaptive.json";
  // A target no run can reach within 12 iterations: stops at the explicit cap, says so.
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 2 --backends naive --warmup 1 --target-ci 0.0001 --iterations 12 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("target +-0.0% NOT reached after 12 iterations (--iterations cap)"), std::string::npos) << b.out;
  const auto j = read_json(json);
  EXPECT_EQ(j["runs"][0]["iterations"]["measured"], 12);
  EXPECT_EQ(j["runs"][0]["iterations"]["converged"], false);
  // A loose target is reached, after at least the minimum of 10 iterations, and the reported
  // interval is within it.
  b = mosaic("bench zoo:fmnist-cnn --batch 2 --backends naive --warmup 1 --target-ci 50 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  const auto j2 = read_json(json);
  const auto& r = j2["runs"][0];
  EXPECT_EQ(r["iterations"]["converged"], true);
  EXPECT_GE(r["iterations"]["measured"].get<int>(), 10);
  EXPECT_LE(r["iteration_ms"]["rel_ci_half_width"].get<double>(), 0.5);
}

TEST(BenchStats, MinSecondsExtendsEachRepeat) {
  const std::string json = ::testing::TempDir() + "mins.json";
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 1 --backends naive --warmup 1 --iterations 1 -t 0.5 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  const auto j = read_json(json);
  std::vector<double> it = j["runs"][0]["samples"]["iteration_ms"];
  double total = 0;
  for (double x : it) total += x;
  EXPECT_GT(it.size(), 1u);
  EXPECT_GE(total, 450.0);  // measured time alone; the loop ends just past 0.5 s
}

TEST(BenchStats, BadCombinationsAreRefused) {
  CmdResult b = mosaic("bench zoo:fmnist-cnn --target-ci 2 --repeats 3");
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.out.find("--target-ci measures one adaptive repeat; it excludes --repeats"), std::string::npos) << b.out;
  b = mosaic("bench zoo:fmnist-cnn -t 50 --max-seconds 60");
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.out.find("--min-seconds 50 does not fit"), std::string::npos) << b.out;
  b = mosaic("bench zoo:fmnist-cnn --target-ci -1");
  EXPECT_NE(b.code, 0);
}

TEST(BenchFlops, TrainingCountsBackwardDataAndWeightsFromTheSchemas) {
  const std::string json = ::testing::TempDir() + "train_flops.json";
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 3 --mode training --backends im2col --optimizer adam --warmup 1 "
                      "--iterations 2 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  const auto j = read_json(json);
  const auto& r = j["runs"][0];
  std::map<std::string, nlohmann::json> node;
  for (const auto& n : r["nodes"]) node[n["name"]] = n;
  // Hand-counted. conv1 sees the input image: no data gradient, only dW (2 x MACs) and dB.
  EXPECT_EQ(node["conv1"]["backward_flops_data"].get<double>(), 0);
  EXPECT_EQ(node["conv1"]["backward_flops_weights"].get<double>(), 2.0 * 3 * 32 * 784 * 1 * 9 + 3 * 32 * 784);
  // conv2: 3 x 64 x 14 x 14 outputs, 32 x 3 x 3 MACs each, for dX and for dW; + dB.
  const double macs2 = 3.0 * 64 * 196 * 32 * 9;
  EXPECT_EQ(node["conv2"]["backward_flops_data"].get<double>(), 2 * macs2);
  EXPECT_EQ(node["conv2"]["backward_flops_weights"].get<double>(), 2 * macs2 + 3 * 64 * 196);
  EXPECT_EQ(node["fc1"]["backward_flops_data"].get<double>(), 2.0 * 3 * 128 * 3136);
  EXPECT_EQ(node["fc1"]["backward_flops_weights"].get<double>(), 2.0 * 3 * 128 * 3136 + 3 * 128);
  // relu1 runs after pool1 in training plans (core/fuse_relu_pool.cpp): on the pooled 14x14.
  EXPECT_EQ(node["relu1"]["backward_flops_data"].get<double>(), 3.0 * 32 * 14 * 14);
  EXPECT_EQ(node["pool1"]["backward_flops_data"].get<double>(), 3.0 * 32 * 14 * 14);  // one add per output
  double sum = 0;
  for (const auto& [name, n] : node)
    if (!n["backward_flops_data"].is_null()) sum += n["backward_flops_data"].get<double>() + n["backward_flops_weights"].get<double>();
  EXPECT_DOUBLE_EQ(r["summary"]["total_backward_flops"].get<double>(), sum);
  // Training GFLOP/s counts the step's forward and backward work.
  const double gflops = (r["summary"]["total_flops"].get<double>() + sum) / (r["summary"]["median_ms"].get<double>() * 1e6);
  EXPECT_NEAR(r["summary"]["gflops"].get<double>(), gflops, 1e-6 * gflops);
  EXPECT_NE(b.out.find("GFLOP per step (forward"), std::string::npos) << b.out;
  // Memory in the TBD suite's categories: a gradient per weight, Adam's two moments per weight.
  const auto& m = r["memory"];
  EXPECT_EQ(m["gradient_bytes"].get<int64_t>(), m["weight_bytes"].get<int64_t>());
  EXPECT_EQ(m["optimizer_state_bytes"].get<int64_t>(), 2 * m["weight_bytes"].get<int64_t>());
  EXPECT_GT(r["create_ms"].get<double>(), 0);
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), m["weight_bytes"].get<int64_t>() + m["activation_bytes"].get<int64_t>());
}

TEST(BenchTrace, EveryMeasuredNodeNestedInItsIterationWithItsFigures) {
  const std::string dir = ::testing::TempDir(), json = dir + "trace_report.json", trace = dir + "trace.json";
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 2 --mode training --backends im2col,onednn --warmup 1 --iterations 3 "
                       "--json " + json + " --trace " + trace);
  ASSERT_EQ(b.code, 0) << b.out;
  const auto report = read_json(json);
  const auto events = read_json(trace)["traceEvents"];
  for (int pid = 1; pid <= 2; ++pid) {
    const auto& run = report["runs"][pid - 1];
    bool named = false;
    for (const auto& e : events)
      named = named || (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == pid && e["args"]["name"] == run["label"]);
    EXPECT_TRUE(named) << run["label"];
    // As many node events as the report has samples, forward and backward.
    size_t want_fwd = 0, want_bwd = 0;
    for (const auto& n : run["nodes"]) {
      want_fwd += n["samples_us"].size();
      want_bwd += n["backward_samples_us"].size();
    }
    std::vector<nlohmann::json> iterations, nodes;
    size_t fwd = 0, bwd = 0, stages = 0;
    for (const auto& e : events) {
      if (e["ph"] != "X" || e["pid"] != pid) continue;
      if (e["cat"] == "iteration") iterations.push_back(e);
      else if (e["cat"] == "stage") ++stages;
      else {
        nodes.push_back(e);
        (e["cat"] == "backward" ? bwd : fwd) += 1;
        for (const char* k : {"op", "backend", "flops", "gflops", "output_bytes", "iteration"})
          EXPECT_TRUE(e["args"].contains(k)) << k;
      }
    }
    EXPECT_EQ(fwd, want_fwd);
    EXPECT_EQ(bwd, want_bwd);
    EXPECT_EQ(iterations.size(), 3u);
    EXPECT_EQ(stages, 4u * 3);  // forward, loss, backward, optimizer step
    for (const auto& n : nodes) {
      const auto& it = iterations.at(n["args"]["iteration"].get<size_t>());
      EXPECT_GE(n["ts"].get<double>() + 1e-3, it["ts"].get<double>()) << n;
      EXPECT_LE(n["ts"].get<double>() + n["dur"].get<double>(), it["ts"].get<double>() + it["dur"].get<double>() + 1e-3) << n;
    }
  }
}

TEST(BenchProcesses, IndependentProcessesArePooled) {
  const std::string json = ::testing::TempDir() + "processes.json";
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 2 --backends naive,onednn --warmup 1 --iterations 4 --repeats 2 "
                       "--processes 3 --json " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("3 independent processes, samples pooled"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("check: every process matches naive"), std::string::npos) << b.out;
  const auto j = read_json(json);
  EXPECT_EQ(j["config"]["processes"], 3);
  ASSERT_EQ(j["processes"].size(), 3u);
  for (const auto& r : j["runs"]) {
    const std::string label = r["label"];
    std::vector<double> it = r["samples"]["iteration_ms"];
    ASSERT_EQ(it.size(), 3u * 2 * 4) << label;  // processes x repeats x iterations
    std::vector<int> rep = r["samples"]["repeat"];
    EXPECT_EQ(rep.front(), 0);
    EXPECT_EQ(rep.back(), 5);  // repeats numbered across processes
    EXPECT_EQ(r["summary"]["repeat_images_per_s"].size(), 6u);
    EXPECT_NEAR(r["summary"]["median_ms"].get<double>(), describe(it).median, 1e-12);
    EXPECT_NEAR(r["summary"]["images_per_s"].get<double>(), 2 / (describe(it).median / 1e3), 1e-6);
    for (const auto& p : j["processes"]) EXPECT_GT(p["runs"][label]["images_per_s"].get<double>(), 0);
    for (const auto& n : r["nodes"])
      if (!n["view"]) {
        EXPECT_EQ(n["samples_us"].size(), 24u) << n["name"];
      }
  }
}

TEST(BenchProcesses, AdaptiveOutcomePerProcess) {
  CmdResult b = mosaic("bench zoo:fmnist-cnn --batch 1 --backends onednn --warmup 1 --target-ci 50 --iterations 30 --processes 2");
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("adaptive: target precision reached in 2 of 2 processes"), std::string::npos) << b.out;
}

TEST(BenchProcesses, AFailingProcessStopsTheRunWithItsError) {
  CmdResult b = mosaic("bench /nonexistent/model.onnx --processes 2");
  EXPECT_EQ(b.code, 2) << b.out;
  EXPECT_NE(b.out.find("/nonexistent/model.onnx"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("process 1 of 2 failed with exit code 2"), std::string::npos) << b.out;
  b = mosaic("bench zoo:fmnist-cnn --processes 2 --csv " + ::testing::TempDir() + "p.csv");
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.out.find("with --processes use --json"), std::string::npos) << b.out;
}

TEST(BenchPeaks, MeasuredOnceCachedAndUsedForPercentAndRoofline) {
  const std::string dir = ::testing::TempDir() + "peaks_cache_" + std::to_string(::getpid());
  const std::string json = ::testing::TempDir() + "peaks.json";
  const std::string cmd = "env MOSAIC_CACHE_DIR=" + dir + " " + std::string(MOSAIC_BIN) +
                          " bench zoo:fmnist-cnn --batch 2 --backends onednn --warmup 1 --iterations 3 --json " + json;
  CmdResult first = mosaic_shell(cmd);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("measuring the machine's sgemm and memory peaks"), std::string::npos) << first.out;
  const auto j1 = read_json(json);
  CmdResult second = mosaic_shell(cmd);
  ASSERT_EQ(second.code, 0) << second.out;
  EXPECT_EQ(second.out.find("measuring the machine's"), std::string::npos) << second.out;  // cached
  const auto j2 = read_json(json);
  EXPECT_EQ(j1["peaks"]["from_cache"], false);
  EXPECT_EQ(j2["peaks"]["from_cache"], true);
  EXPECT_EQ(j2["peaks"]["sgemm_gflops"], j1["peaks"]["sgemm_gflops"]);
  const double peak = j2["peaks"]["sgemm_gflops"], bw = j2["peaks"]["bandwidth_gbs"];
  EXPECT_GT(peak, 1);
  EXPECT_GT(bw, 0.1);
  EXPECT_DOUBLE_EQ(peak, std::max(j2["peaks"]["openblas_sgemm_gflops"].get<double>(), j2["peaks"]["onednn_sgemm_gflops"].get<double>()));
  const auto& conv1 = j2["runs"][0]["nodes"][0];
  ASSERT_EQ(conv1["name"], "conv1+relu1");
  // Read once: the image 2x1x28x28, weights 32x1x3x3, bias 32; written once: 2x32x28x28.
  const double bytes = 4.0 * (2 * 784 + 32 * 9 + 32 + 2 * 32 * 784);
  EXPECT_EQ(conv1["bytes_moved"].get<double>(), bytes);
  const double flops = conv1["flops"], ai = flops / bytes;
  EXPECT_DOUBLE_EQ(conv1["arithmetic_intensity"].get<double>(), ai);
  EXPECT_NEAR(conv1["roofline_gflops"].get<double>(), std::min(peak, ai * bw), 1e-9);
  EXPECT_NEAR(conv1["pct_of_peak"].get<double>(), 100 * conv1["gflops"].get<double>() / peak, 1e-9);
  EXPECT_NEAR(j2["runs"][0]["summary"]["pct_of_peak"].get<double>(),
              100 * j2["runs"][0]["summary"]["gflops"].get<double>() / peak, 1e-9);
  // --no-peaks: nothing measured, the figures are null.
  CmdResult none = mosaic_shell("env MOSAIC_CACHE_DIR=" + dir + "_none " + std::string(MOSAIC_BIN) +
                                " bench zoo:fmnist-cnn --batch 2 --backends onednn --warmup 1 --iterations 2 --no-peaks --json " + json);
  ASSERT_EQ(none.code, 0) << none.out;
  const auto j3 = read_json(json);
  EXPECT_TRUE(j3["peaks"].is_null());
  EXPECT_TRUE(j3["runs"][0]["nodes"][0]["pct_of_peak"].is_null());
  std::filesystem::remove_all(dir);
}

TEST(OthersCpu, AnotherProcessSpinningIsCountedAndThisOneIsNot) {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT_GT(cpus, 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile unsigned long x = 0;
    for (;;) x = x + 1;  // spins until killed
  }
  // This process spins too: its own CPU time must not count as "others".
  const double share = others_cpu_share_during([] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    volatile unsigned long y = 0;
    while (std::chrono::steady_clock::now() < end) y = y + 1;
  });
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // One spinning child is one core of `cpus` (less whatever the scheduler gives this process).
  EXPECT_GE(share, 0.6 / static_cast<double>(cpus)) << share;
  EXPECT_LE(share, 1.0);
}

TEST(BenchPeaks, AContendedRefreshNeverReplacesAQuietMeasurement) {
  const std::string dir = ::testing::TempDir() + "peaks_contended_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ::setenv("MOSAIC_CACHE_DIR", dir.c_str(), 1);
  auto probe = [](double gflops, double others) {
    return [=] {
      MachinePeaks m;
      m.sgemm_gflops = m.openblas_sgemm_gflops = gflops;
      m.bandwidth_gbs = 10;
      m.read_bandwidth_gbs = 12;
      m.others_cpu = others;
      return m;
    };
  };
  int calls = 0;
  auto counted = [&](std::function<MachinePeaks()> f) {
    return [&calls, f] {
      ++calls;
      return f();
    };
  };
  // No cache: a contended measurement is used and stored, and says so when read back.
  MachinePeaks a = load_or_measure_peaks("k", counted(probe(50, 0.5)));
  EXPECT_EQ(a.sgemm_gflops, 50);
  EXPECT_FALSE(a.from_cache);
  MachinePeaks b = load_or_measure_peaks("k", counted(probe(99, 0.0)));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(b.from_cache);
  EXPECT_EQ(b.sgemm_gflops, 50);
  EXPECT_DOUBLE_EQ(b.others_cpu, 0.5);
  // A quiet refresh replaces it; a contended refresh after that keeps the quiet one.
  MachinePeaks c = load_or_measure_peaks("k", counted(probe(100, 0.02)), /*refresh=*/true);
  EXPECT_EQ(c.sgemm_gflops, 100);
  MachinePeaks d = load_or_measure_peaks("k", counted(probe(40, 0.6)), /*refresh=*/true);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(d.sgemm_gflops, 100);
  EXPECT_TRUE(d.from_cache);
  EXPECT_DOUBLE_EQ(d.kept_over_contended, 0.6);
  EXPECT_EQ(load_or_measure_peaks("k", counted(probe(1, 0))).sgemm_gflops, 100);
  ::unsetenv("MOSAIC_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

TEST(BenchPeaks, FiguresAboveThePeakAreFlagged) {
  BenchReport rep;
  rep.peaks.sgemm_gflops = 100;
  ConfigReport c;
  c.label = "onednn";
  c.gflops = 90;
  NodeRow fast, view;
  fast.name = "conv2";
  fast.gflops = 180;
  view.name = "flatten";
  view.view = true;
  view.gflops = 1e9;
  c.nodes = {fast, view};
  rep.configs.push_back(c);
  auto notes = peak_sanity_notes(rep);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("1 node(s) above 105% of the sgemm peak (conv2 180%)"), std::string::npos) << notes[0];
  rep.configs[0].gflops = 106;
  rep.configs[0].nodes[0].gflops = 104;  // within 5%: not flagged
  notes = peak_sanity_notes(rep);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("onednn ran at 106% of the sgemm peak"), std::string::npos) << notes[0];
  rep.peaks.sgemm_gflops = 0;  // no peaks: nothing to say
  EXPECT_TRUE(peak_sanity_notes(rep).empty());
}

TEST(BenchPeaks, Bf16ConfigurationsAreDividedByTheBf16MatmulPeak) {
  // A bf16 run at 183 GFLOP/s on a machine whose sgemm peaks at 100 and whose bfloat16 matmul
  // peaks at 300: 61% of its own peak, not "183% of sgemm peak" with a warning (the finding).
  BenchReport rep;
  rep.peaks.sgemm_gflops = 100;
  rep.peaks.bf16_gemm_gflops = 300;
  rep.peaks.bandwidth_gbs = 10;
  ConfigReport f32, bf16;
  f32.label = "onednn";
  f32.gflops = 90;
  bf16.label = "onednn bf16";
  bf16.precision = "bf16";
  bf16.gflops = 183;
  NodeRow conv;
  conv.name = "conv2";
  conv.op = "Conv";
  conv.flops = 1e9;
  conv.gflops = 240;
  conv.bytes_moved = 1000;
  bf16.nodes = {conv};
  rep.configs = {f32, bf16};
  EXPECT_TRUE(peak_sanity_notes(rep).empty());
  std::ostringstream os;
  print_report(rep, os);
  EXPECT_NE(os.str().find("90.0% of sgemm peak"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("61.0% of bf16 matmul peak"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("peaks: bf16 matmul 300.0 GFLOP/s"), std::string::npos) << os.str();
  EXPECT_EQ(os.str().find("183"), os.str().find("183.0 GFLOP/s")) << "no 183% anywhere: " << os.str();
  const nlohmann::json j = bench_json(rep);
  ASSERT_EQ(j["runs"].size(), 2u) << j.dump();
  EXPECT_DOUBLE_EQ(j["runs"][1]["summary"]["pct_of_peak"].get<double>(), 61.0);
  EXPECT_DOUBLE_EQ(j["runs"][1]["nodes"][0]["pct_of_peak"].get<double>(), 80.0);
  EXPECT_DOUBLE_EQ(j["peaks"]["bf16_gemm_gflops"].get<double>(), 300.0);
  // Without a bf16 peak (not measured), a bf16 configuration has no %peak at all.
  rep.peaks.bf16_gemm_gflops = 0;
  EXPECT_TRUE(bench_json(rep)["runs"][1]["summary"]["pct_of_peak"].is_null());
  rep.configs[1].gflops = 400;  // above its own peak: flagged against it
  rep.peaks.bf16_gemm_gflops = 300;
  auto notes = peak_sanity_notes(rep);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("onednn bf16 ran at 133% of the bf16 matmul peak"), std::string::npos) << notes[0];
  // The probe: a figure where oneDNN has a bfloat16 matmul, 0 (never an exception) where not.
  const double probed = probe_bf16_gemm_gflops(256, 1);
  EXPECT_TRUE(probed == 0 || (std::isfinite(probed) && probed > 0)) << probed;
  std::cout << "[ bf16     ] oneDNN's bfloat16 matmul here: " << probed << " GFLOP/s (n = 256)\n";
}

// The memory probes must measure the memory: their working set is four times the last-level
// cache (this VM's Xeon has 300 MiB of level 3, and the read probe's old 256 MiB fit in it),
// read from sysconf here and in the probe alike, but capped at an eighth of the RAM.
TEST(MachineProbe, TheMemoryProbesWorkingSetOutgrowsTheLastLevelCache) {
  const long long llc = last_level_cache_bytes();
  const long long probe = static_cast<long long>(memory_probe_mib()) << 20;
  const long long ram = static_cast<long long>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  EXPECT_GE(probe, 256LL << 20);
  if (llc > 0 && 4 * llc <= ram / 8) {
    EXPECT_GE(probe, 4 * llc) << "last-level cache " << llc;
  }
  EXPECT_LE(probe, std::max(256LL << 20, ram / 8 + (1 << 20)));
  std::cout << "[ probe    ] last-level cache " << (llc >> 20) << " MiB, memory probes over " << (probe >> 20)
            << " MiB\n";
}

}  // namespace
}  // namespace mosaic::test
