// Shared by the scenarios of `mosaic loadgen` (api/loadgen.cpp: model calls;
// api/loadgen_generate.cpp: generation requests): the clock, the workers' threads, the
// server's schedule and the latency figures.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "api/loadgen.hpp"

namespace mosaic::api::lg {

using Clock = std::chrono::steady_clock;

/// The most queries (offline: calls) one run keeps: three doubles each, 240 MB at most.
constexpr int64_t kMaxQueries = 10'000'000;
/// The longest a server run's schedule may be: a rate that needs more is refused, not slept.
constexpr double kMaxScheduleSeconds = 86400;

inline double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::string fixed(double v, int digits);

/// Runs `f(worker index)` on one thread per worker, each with `threads` OpenMP threads, and
/// joins them; the first error any returns.
Status on_workers(size_t workers, int threads, const std::function<Status(size_t)>& f);

/// Latency figures of a run from its queries' latencies: mean, percentiles, the early-stopping
/// estimate of `percentile` (0: none) and whether it meets `bound_ms` (0: no bound).
void summarise(LoadRun& run, double percentile, double bound_ms);

/// Server: `queries` queries at Poisson arrivals of `rate` per second (seeded), each put on
/// the queue at its scheduled time; `workers` threads take them in order and `serve(w, i)`
/// serves query i on worker w. A query's latency runs from its scheduled arrival to the end
/// of its serve(); `spin`: idle workers spin 2 ms before they sleep (while a core is free).
Expected<LoadRun> run_server(size_t workers, int threads, double rate, int64_t queries, uint64_t seed, bool spin,
                             const std::function<Status(size_t w, size_t i)>& serve);

/// The server run's checks of a rate: the queries it needs for `min_queries` and
/// `min_duration`, refused past kMaxQueries or a day's schedule.
Expected<int64_t> server_queries(double rate, int64_t min_queries, double min_duration);

/// A search for the highest rate that meets a criterion (find_highest_rate).
struct RateSearch {
  double capacity = 0;   ///< what one call's (request's) time alone implies: workers / service time
  int64_t steps = 6;     ///< halvings after the first bracket
  bool feasible = true;  ///< false: no rate can meet it (a bound below one call's time); said in `infeasible`
  std::string infeasible;
  /// Why the last rate tried missed, for the note when none met ("had p99 12.3 ms").
  std::function<std::string(const LoadRun&)> missed;
};
using ServerRun = std::function<Expected<LoadRun>(double rate)>;

/// The server search: bisection between a rate that met the criterion (LoadRun::meets_bound)
/// and one that did not, from the capacity. First bracket it (up to 1.5x the capacity; down to
/// 1% of it, where queueing is negligible and a lower rate would not help), then halve. Every
/// rate tried is a run of r.runs; the highest that met it is r.max_rate.
Status find_highest_rate(const RateSearch& s, const ServerRun& server_run, LoadgenReport& r);

/// Generation requests (`--generate`) under the server scenario: fills r.runs and r.generation.
Status generation_scenario(const LoadgenOptions& o, LoadgenReport& r);

/// The `generation` object of the JSON report: the figures and every request.
nlohmann::json generation_json(const GenerationServing& g);

}  // namespace mosaic::api::lg
