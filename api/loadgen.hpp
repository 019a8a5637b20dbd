// Serving scenarios (`mosaic loadgen`, docs/loadgen.md): MLPerf Inference LoadGen's four ways
// of sending queries to a system under test, on any model, with LoadGen's figures.
//
//   single-stream  one query (one sample) at a time, the next sent when the last completes;
//                  the figure is the 90th percentile of latency.
//   multi-stream   likewise, each query `batch` samples (default 8); the 99th percentile.
//   server         one-sample queries arriving at random (Poisson, seeded) at a target rate and
//                  sent on schedule, whether or not a worker is free; the 99th percentile of
//                  latency counted from the scheduled arrival, so a queue shows. With a
//                  latency bound, the run meets it or not, and `find_rate` searches for the
//                  highest rate that does.
//   offline        every sample at once, served in batches by the workers; samples/s.
//
// A percentile is reported as LoadGen's early-stopping estimate: the smallest latency that
// bounds the true percentile from above with 99% confidence given the queries seen
// (metrics/stats.hpp), so a short run reports a conservative figure, never an optimistic one.
// Workers are plans of the model, one per thread group, serving queries concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/models.hpp"
#include "api/util.hpp"
#include "backends/registry.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

/// Generation requests instead of model calls (`--generate`, server scenario): each query is
/// a prompt to continue, served by a worker's decoder (api/generate.hpp) token by token.
/// Lengths are drawn per request (seeded): "N", or "uniform:A-B" (A to B inclusive).
struct GenerateLoad {
  bool enabled = false;
  std::string prompt_tokens = "16";  ///< the prompt lengths' distribution
  std::string new_tokens = "16";     ///< the output lengths' distribution
  double ttft_bound = 0;             ///< ms from the scheduled arrival to the first token (0: none)
  double tpot_bound = 0;             ///< ms per output token after the first (0: none)
  /// With `find_rate`: the share of good requests (every bound met) a rate must reach; the
  /// search finds the highest such rate (MLPerf's LLM server figure, as a share: 0.99).
  double goodput_target = 0.99;
};

struct LoadgenOptions {
  std::string model;  ///< ONNX file, or zoo:NAME
  std::string backend = default_backend();
  std::string scenario;             ///< single-stream, multi-stream, server or offline
  int64_t min_queries = 0;          ///< at least this many queries (offline: samples); 0: the scenario's default
  double min_duration = 2;          ///< and at least this many seconds of them
  double rate = 0;                  ///< server: queries/s scheduled (required unless `find_rate`)
  double latency_bound = 0;         ///< server: the p99 bound in ms (0: none)
  /// server: search for the highest rate whose p99 meets the bound (generation requests: whose
  /// goodput reaches `generate.goodput_target`)
  bool find_rate = false;
  int64_t search_steps = 6;         ///< server search: runs after the first bracket
  int64_t workers = 1;              ///< server and offline: plans serving concurrently
  bool fuse = true;                 ///< bench's graph fusions (core/fuse.hpp)
  GenerateLoad generate;
  /// batch: samples per query (multi-stream, default 8) or per call (offline, default 8);
  /// single-stream and server queries are one sample. threads: in all, split among the
  /// workers. seed: the inputs and the server's arrivals.
  CommonOptions common;
};

/// One run of a scenario at one setting.
struct LoadRun {
  double target_rate = 0;          ///< server: scheduled queries/s; 0 otherwise
  int64_t queries = 0, samples = 0;
  double duration_s = 0;           ///< first issue to last completion
  double samples_per_s = 0;        ///< samples / duration
  double queries_per_s = 0;        ///< queries / duration
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;  ///< query latency
  double percentile = 0;           ///< the scenario's: 0.90 or 0.99 (0: offline)
  /// LoadGen's early-stopping estimate of that percentile; empty when there were too few
  /// queries for one (fewer than `estimate_min_queries`).
  std::optional<double> estimate_ms;
  int64_t overlatency = 0;         ///< queries slower than the estimate
  int64_t estimate_min_queries = 0;
  double max_issue_lag_ms = 0;     ///< server: the latest a query was sent after its scheduled time
  /// Server: a query's mean time in the model, from a worker taking it to its completion (the
  /// rest of its latency is the queue and the dispatch).
  double mean_service_ms = 0;
  bool meets_bound = true;         ///< server with a bound: the estimate exists and is within it
  std::optional<double> goodput;   ///< generation requests: the share that met every bound
  std::vector<double> issue_ms;    ///< per query: its scheduled issue, ms after the start
  std::vector<double> latency_ms;  ///< per query, in issue order
  std::vector<double> service_ms;  ///< server: per query, its time in the model (in issue order)
};

/// One served generation request (`--generate`), times in ms; TTFT and the end from the
/// request's scheduled arrival, so a queue shows in them.
struct ServedRequest {
  double issue_ms = 0;               ///< scheduled arrival, after the start
  int64_t prompt_tokens = 0, new_tokens = 0;
  double queue_ms = 0;               ///< arrival to a worker taking it
  double ttft_ms = 0, tpot_ms = 0, e2e_ms = 0;  ///< tpot: mean gap after the first token (0: one token)
  bool good = true;                  ///< met every bound given
};

/// The generation figures of a `--generate` run (the run's LoadRun holds its end-to-end
/// latencies).
struct GenerationServing {
  std::string prompt_tokens, new_tokens;  ///< the distributions, as given
  std::string decoding;                   ///< "kv-cache" or "recompute"
  double ttft_bound = 0, tpot_bound = 0;
  std::vector<ServedRequest> requests;    ///< in arrival order
  double ttft_p50_ms = 0, ttft_p90_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0, tpot_p90_ms = 0, tpot_p99_ms = 0;
  std::optional<double> ttft_p99_estimate_ms, tpot_p99_estimate_ms;  ///< early-stopping estimates
  double goodput = 0;                     ///< the share of requests that met every bound
  double good_requests_per_s = 0, requests_per_s = 0, output_tokens_per_s = 0;
  double plan_ms = 0;                     ///< the warm-up's planning of every length the requests need
};

struct LoadgenReport {
  std::string model, backend, scenario;
  int64_t samples_per_query = 1;   ///< per model call
  int64_t workers = 1, threads_per_worker = 1;
  double service_ms = 0;           ///< one call alone: median of the warm-up calls
  double latency_bound = 0;        ///< ms, 0: none
  std::vector<LoadRun> runs;       ///< server search: every rate tried, in order
  std::optional<double> max_rate;  ///< find_rate: the highest rate tried that met the bound (or the goodput target)
  std::string metric;              ///< LoadGen's headline figure, in words
  std::optional<double> metric_value;  ///< empty: none (no rate met the bound; too few queries)
  std::string metric_unit;
  /// `--generate` runs: the figures and requests of the run (of a search: at the highest rate
  /// that reached the goodput target, else the last rate tried)
  std::optional<GenerationServing> generation;
  std::vector<std::string> notes;
  nlohmann::json provenance;
};

/// Runs the scenario. Errors name the option: an unknown scenario, a rate or bound that is
/// not a positive finite number, options of another scenario, too many workers.
Expected<LoadgenReport> loadgen(const LoadgenOptions& o);

/// The report as JSON (mosaic.loadgen/1), every query's issue time and latency included.
nlohmann::json loadgen_report_json(const LoadgenReport& r);

/// The scenarios' names, for help texts and errors.
const std::vector<std::string>& loadgen_scenarios();

}  // namespace mosaic::api
