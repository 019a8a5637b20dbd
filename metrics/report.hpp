// Benchmark reports: one ConfigReport per backend configuration, printed as tables
// (console sink) or written as JSON / CSV (file sinks). See docs/json-schema.md.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "metrics/benchmark.hpp"
#include "metrics/peaks.hpp"
#include "metrics/provenance.hpp"

namespace mosaic {

struct NodeRow {
  std::string name, op, backend, requested, output_shape, fallback_reason;
  std::string widened_from;  ///< PlanStep::widened_from: "" where it computes in the node's own types
  std::string device;  ///< the device it computes on ("cuda:0"; "" for the host)
  double flops = 0, median_us = 0, min_us = 0, gflops = 0, share = 0;
  double backward_us = 0;  ///< training benchmarks: median backward time
  double backward_flops_data = 0, backward_flops_weights = 0;  ///< training: see PlanStep
  double backward_gflops = 0;                                  ///< training: both / backward_us
  NodeStats timing;        ///< every forward/backward sample and its statistics (ns)
  int64_t bytes_moved = 0;  ///< forward: every input (weights included) read once + outputs written once
  int64_t output_bytes = 0, workspace_bytes = 0;
  bool view = false;  ///< zero-copy view (Reshape/Flatten/...): not executed
};

struct ConfigReport {
  std::string label;
  std::string placement;
  std::vector<NodeRow> nodes;
  bool checked = false, check_ok = true;
  double max_abs_err = 0, max_rel_err = 0;
  std::string check_message;
  std::string precision = "f32";  ///< arithmetic of its convolutions and matrix products (--precision)
  /// bf16 configurations: the share of rows whose largest output (top-1 class) is the float32
  /// oracle's (-1: not measured).
  double top1_agreement = -1;
  /// int8 configurations: output 0's signal-to-quantisation-noise ratio against the float32
  /// oracle's, in dB (NaN: not measured; +inf: equal).
  double sqnr_db = std::numeric_limits<double>::quiet_NaN();
  /// When the check failed: the first node that diverges from naive on its own (per-node
  /// replay, validate/per_node.hpp), e.g. "'fc2' (Gemm) on onednn: max abs 0.0123, ...".
  std::string first_divergent_node;
  int warmup = 0, measured = 0, repeats = 1;
  bool budget_hit = false;
  BenchResult timing;  ///< samples, statistics and modes of the run (its per-node part is in `nodes`)
  double median_ms = 0, min_ms = 0, images_per_s = 0, gflops = 0, speedup_vs_naive = 0, overhead_us = 0;
  double kernel_ms = 0;
  double forward_ms = 0, backward_ms = 0, loss_ms = 0, optimizer_ms = 0;  ///< training
  std::vector<double> repeat_images_per_s;
  int64_t weight_bytes = 0, activation_bytes = 0, workspace_bytes = 0, peak_tracked_bytes = 0;
  int64_t attention_bytes = 0;  ///< of the activations: attention scores live at once (Plan::attention_bytes)
  /// What the plan holds on each device (Plan::device_bytes): activations, resident constants
  /// and (training) gradients; the fields above count the host's memory only.
  std::map<std::string, Plan::DeviceBytes> device_bytes;
  /// What each device said of itself right after the timed run (Device::sample): GPU
  /// utilisation, clocks, power, temperature.
  std::map<std::string, std::vector<std::pair<std::string, double>>> device_state;
  double create_ms = 0;  ///< plan creation: building every kernel (create stage)
  double total_flops = 0;           ///< forward FLOPs of one batch
  double total_backward_flops = 0;  ///< training: backward FLOPs of one batch (data + weights)
  int fallbacks = 0;
  /// Training plans: every parameter's gradient, in parameter order, with the plan step
  /// (node row) whose backward makes it final (-1: no step reads it). The bucket schedule
  /// of data-parallel training, and `mosaic simulate`, derive from these.
  struct Gradient {
    std::string name;
    int64_t bytes = 0;
    int final_step = -1;
  };
  std::vector<Gradient> gradients;
};

struct BenchReport {
  std::string model;
  int64_t batch = 1;
  /// Token models (an int64 input [batch, T]): T, and throughput reads sequences/s and
  /// tokens/s; 0 for images.
  int64_t sequence = 0;
  std::string mode = "inference";
  int threads = 0;
  std::vector<BackendKernels> kernels;  ///< what each backend picked here (its properties)
  BenchConfig config;
  uint64_t seed = 0;
  std::string input;  ///< what the input was: random values (seed) or real data (bench --data)
  std::vector<std::string> notes;
  std::vector<ConfigReport> configs;
  Provenance provenance;
  MachinePeaks peaks;  ///< sgemm_gflops 0: not measured (--no-peaks)
  /// The peaks of the devices the configurations compute on (Device::measure_peaks), which
  /// their steps' % of peak and roofline use; empty with --no-peaks.
  std::map<std::string, Device::Peaks> device_peaks;
  /// SIGINT/SIGTERM stopped the run: the configurations above finished (the last may have
  /// fewer iterations), the rest were not run.
  bool interrupted = false;
  int64_t peak_rss_bytes = 0;  ///< the process's peak resident set (getrusage) when the report was made
  nlohmann::json distributed;  ///< bench under mpirun: per configuration, the data-parallel figures (null otherwise)
  nlohmann::json auto_placement;  ///< bench --assign auto: the choice and its side-by-side ratio (null otherwise)
};

/// Builds the per-node rows and summary of one configuration.
ConfigReport make_config_report(const std::string& label, const Plan& plan, const BenchResult& result, int64_t batch);
/// Fills speedup_vs_naive from the "naive" configuration (if present) or a given naive median.
void fill_speedups(BenchReport& report, double naive_median_ms);

/// The whole report for people: print_report_header, print_config for each configuration,
/// print_report_footer (the ranking of the backends, an interruption, peak RSS, provenance).
void print_report(const BenchReport& report, std::ostream& os);
/// Model, batch, kernels, input, peaks and notes.
void print_report_header(const BenchReport& report, std::ostream& os);
/// One configuration's per-node table, summary, statistics, memory and check.
void print_config(const BenchReport& report, const ConfigReport& config, std::ostream& os);
/// One line for a configuration: throughput, median, GFLOP/s and the check (bench --quiet).
void print_config_brief(const BenchReport& report, const ConfigReport& config, std::ostream& os);
/// The ranking of the configurations, fastest first (nothing for one configuration).
void print_ranking(const BenchReport& report, std::ostream& os);
/// Notes added at the end, the ranking, an interruption, peak RSS and provenance.
void print_report_footer(const BenchReport& report, std::ostream& os);
/// The report as JSON (schema mosaic.bench/2, docs/json-schema.md); write_json writes it.
nlohmann::json bench_json(const BenchReport& report);
Status write_json(const BenchReport& report, const std::string& path);
Status write_csv(const BenchReport& report, const std::string& path);

/// Statistics of a sample in nanoseconds as JSON in `unit` (1e3: microseconds, 1e6:
/// milliseconds); null when there are no samples, null CI bounds when the sample is too small.
nlohmann::json stats_json(const SampleStats& s, double unit);
/// A device's memory as a plan holds it, by category (JSON keys *_bytes; docs/json-schema.md).
nlohmann::json device_bytes_json(const Plan::DeviceBytes& bytes);

/// The process's peak resident set size so far (getrusage), in bytes.
int64_t peak_rss_bytes();

/// "12.3 MB" style.
std::string format_bytes(double bytes);

}  // namespace mosaic
