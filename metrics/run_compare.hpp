// `mosaic compare A B`: are two benchmark runs' timings different? Per configuration (the
// gate) and per node (bench), per figure (generate: metrics/generate_compare.cpp), a significance test plus a practical threshold on the change
// (docs/metrics.md#comparing-runs). Runs of several processes (bench --processes K, K >= 3)
// are compared process by process (Welch's t-test on the log of each process's median), so
// the test sees the between-process variation; single-process runs by their raw samples
// (Mann-Whitney U), which cannot see it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

struct CompareOptions {
  double alpha = 0.05;      ///< significance level of each configuration's test
  double threshold = 0.05;  ///< smallest relative change of the median that counts (0.05: 5%)
  /// Compare runs that differ in model, mode, batch, threads or backend set (refused otherwise:
  /// the difference would be the settings', not the code's).
  bool force = false;
};

enum class Change {
  kNone,             ///< not significant: no detectable difference
  kWithinThreshold,  ///< significant, but the median moved less than the threshold
  kSlower,           ///< significant and slower by more than the threshold
  kFaster,           ///< significant and faster by more than the threshold
  kTooFewSamples,    ///< fewer than kMinCompareSamples in A or B: no test
};
const char* change_name(Change c);

inline constexpr size_t kMinCompareSamples = 8;
/// Processes per run for the process-level test.
inline constexpr size_t kMinCompareProcesses = 3;

struct TimingComparison {
  std::string name;  ///< configuration label, or node name (" (backward)" for backward)
  std::string op;    ///< nodes: op type
  size_t n_a = 0, n_b = 0;
  double median_a = 0, median_b = 0;  ///< in the samples' unit
  double change = 0;                  ///< median_b / median_a - 1
  double p_value = 0;                 ///< NaN with kTooFewSamples
  Change verdict = Change::kNone;
  bool by_process = false;  ///< n_* are processes, median_* geometric means of their medians
  std::string unit;         ///< what a sample is when not an iteration or a process ("decode step", "run")
};

/// Compares two samples of times (iterations of one run each) at level `alpha` with
/// `threshold`: Mann-Whitney U, change of the median.
TimingComparison compare_samples(const std::string& name, const std::vector<double>& a, const std::vector<double>& b,
                                 double alpha, double threshold);
/// Compares per-process medians: Welch's t-test on their logs, change of the geometric mean.
TimingComparison compare_process_medians(const std::string& name, const std::vector<double>& a,
                                         const std::vector<double>& b, double alpha, double threshold);

struct ConfigComparison {
  std::string label;
  std::string unit = "ms";
  TimingComparison total;                 ///< per-iteration time: what gates
  std::vector<TimingComparison> nodes;    ///< per node (forward, and backward in training)
  double node_alpha = 0;                  ///< alpha / number of node tests (Bonferroni)
};

struct RunComparison {
  /// "bench": configurations are backends, their time an iteration's. "generate": they are the
  /// decode step and the first token (at each context depth of a --context sweep).
  std::string kind = "bench";
  std::vector<std::string> warnings;  ///< settings that differ between A and B
  std::vector<ConfigComparison> configs;
  std::vector<std::string> only_a, only_b;  ///< configurations in one run only
  size_t processes_a = 1, processes_b = 1;
  bool by_process = false;  ///< both runs have >= kMinCompareProcesses processes
  /// Some configuration's iteration time is significantly slower beyond the threshold.
  bool slower() const;
};

/// Compares two bench documents (mosaic.bench/2: raw samples are needed). Errors when either
/// is not one, or when they share no configuration.
Expected<RunComparison> compare_bench_runs(const nlohmann::json& a, const nlohmann::json& b, const CompareOptions& o);

/// Compares two generate documents (mosaic.generate/1): every decode step (the time between
/// consecutive tokens, of every timed run) and every run's time to first token, by Mann-Whitney U,
/// at the top level and at each context depth both swept; when both ran --processes K >= 3,
/// each process's TPOT and TTFT instead, by Welch's t-test on their logs. Refused unless --force when the model,
/// backend, decoding, batch, prompt, new tokens or sampling differ. Errors when either is not one.
Expected<RunComparison> compare_generate_runs(const nlohmann::json& a, const nlohmann::json& b, const CompareOptions& o);

/// The comparison as JSON (schema mosaic.compare/1, docs/json-schema.md).
nlohmann::json comparison_json(const RunComparison& r, const CompareOptions& o, const std::string& a_name,
                               const std::string& b_name);

}  // namespace mosaic
