// LoadGen's scenarios on a model (api/loadgen.hpp): the workers, the query schedules, and the
// server's search for the highest rate under a latency bound.
#include "api/loadgen.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "api/loadgen_internal.hpp"
#include "api/option_rules.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "ir/interrupt.hpp"
#include "metrics/provenance.hpp"
#include "metrics/stats.hpp"

namespace mosaic::api {
namespace lg {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace lg

namespace {

using namespace lg;

/// The scenario's defaults: samples per query, the percentile, and the least queries of a
/// run (LoadGen's own are 600 s and up to 270,336 queries, for submissions; these keep an
/// interactive run to seconds and still give an early-stopping estimate).
struct Scenario {
  int64_t samples = 1;
  double percentile = 0;
  int64_t min_queries = 0;
};

Expected<Scenario> scenario_of(const LoadgenOptions& o) {
  if (o.scenario == "single-stream") return Scenario{1, 0.90, 64};
  if (o.scenario == "multi-stream") return Scenario{8, 0.99, 662};
  if (o.scenario == "server") return Scenario{1, 0.99, 662};
  if (o.scenario == "offline") return Scenario{8, 0, 64};
  std::string known;
  for (const std::string& s : loadgen_scenarios()) known += (known.empty() ? "" : ", ") + s;
  return Status::invalid("`scenario` '" + o.scenario + "' is not one of " + known);
}

Status check_options(const LoadgenOptions& o) {
  MOSAIC_ASSIGN_OR_RETURN(const Scenario sc, scenario_of(o));
  (void)sc;
  MOSAIC_RETURN_IF_ERROR(check_numbers("loadgen", {{"min_queries", static_cast<double>(o.min_queries)},
                                                   {"min_duration", o.min_duration},
                                                   {"rate", o.rate},
                                                   {"latency_bound", o.latency_bound},
                                                   {"search_steps", static_cast<double>(o.search_steps)},
                                                   {"workers", static_cast<double>(o.workers)},
                                                   {"threads", o.common.threads}}));
  if (o.common.batch != 0) MOSAIC_RETURN_IF_ERROR(check_numbers("loadgen", {{"batch", static_cast<double>(o.common.batch)}}));
  if (o.min_queries > kMaxQueries)
    return Status::invalid("`min_queries` " + std::to_string(o.min_queries) + ": a run keeps at most " +
                           std::to_string(kMaxQueries) + " queries");
  if (!builtin_registry().has_backend(o.backend)) return unknown_backend(o.backend);
  const bool server = o.scenario == "server";
  if (!server && (o.rate > 0 || o.latency_bound > 0 || o.find_rate))
    return Status::invalid(std::string("`") + (o.rate > 0 ? "rate" : o.latency_bound > 0 ? "latency_bound" : "find_rate") +
                           "` is for the server scenario, not " + o.scenario);
  const GenerateLoad& gl = o.generate;
  if (server && o.find_rate && gl.enabled && gl.ttft_bound <= 0 && gl.tpot_bound <= 0)
    return Status::invalid("`find_rate` with generation requests searches for the highest rate whose goodput reaches "
                           "`goodput_target` under `ttft_bound` and/or `tpot_bound`: give a bound (ms)");
  if (server && o.find_rate && !gl.enabled && o.latency_bound <= 0)
    return Status::invalid("`find_rate` searches for the highest rate under `latency_bound`: give the bound (ms)");
  if (server && !o.find_rate && o.rate <= 0)
    return Status::invalid("the server scenario sends queries at `rate` per second: give it, or `find_rate` with a "
                           "`latency_bound`");
  if (server && o.find_rate && o.rate > 0)
    return Status::invalid("`rate` and `find_rate`: the search picks the rates itself; give one of them");
  if ((o.scenario == "single-stream" || o.scenario == "server") && o.common.batch > 1)
    return Status::invalid("`batch`: " + o.scenario + " queries are one sample each (LoadGen's); multi-stream and "
                           "offline take a batch");
  MOSAIC_RETURN_IF_ERROR(check_numbers("loadgen", {{"ttft_bound", gl.ttft_bound}, {"tpot_bound", gl.tpot_bound}}));
  const GenerateLoad defaults;
  if (!(gl.goodput_target > 0 && gl.goodput_target <= 1))
    return Status::invalid("`goodput_target` must be a share in (0, 1], got " + fixed(gl.goodput_target, 4));
  if (gl.goodput_target != defaults.goodput_target && !(gl.enabled && o.find_rate))
    return Status::invalid("`goodput_target` is what `find_rate` searches for with generation requests: add `generate` "
                           "and `find_rate`");
  const char* generation_only = gl.ttft_bound > 0                           ? "ttft_bound"
                                : gl.tpot_bound > 0                           ? "tpot_bound"
                                : gl.prompt_tokens != defaults.prompt_tokens ? "prompt_tokens"
                                : gl.new_tokens != defaults.new_tokens       ? "new_tokens"
                                                                             : nullptr;
  if (!gl.enabled && generation_only)
    return Status::invalid(std::string("`") + generation_only + "` is for generation requests: add `generate`");
  if (gl.enabled && !server)
    return Status::invalid("`generate`: generation requests arrive in the server scenario, not " + o.scenario);
  if (gl.enabled && o.latency_bound > 0)
    return Status::invalid("`latency_bound`: generation requests are judged by `ttft_bound` and `tpot_bound` (goodput)");
  if (gl.enabled && o.common.batch > 1)
    return Status::invalid("`batch`: a generation request is one sequence");
  if (gl.enabled && !o.common.inputs.empty())
    return Status::invalid("`input`: generation requests feed the model's inputs themselves (random prompts)");
  if ((o.scenario == "single-stream" || o.scenario == "multi-stream") && o.workers > 1)
    return Status::invalid("`workers`: " + o.scenario + " sends the next query when the last completes, so one "
                           "worker serves it; server and offline take more");
  return Status::ok();
}

/// A worker: its own plan of the model.
using Workers = std::vector<std::unique_ptr<Plan>>;

}  // namespace

namespace lg {

Status on_workers(size_t workers, int threads, const std::function<Status(size_t)>& f) {
  std::vector<std::thread> pool;
  std::mutex mu;
  Status first = Status::ok();
  for (size_t w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      omp_set_num_threads(threads);
      Status st = f(w);
      std::lock_guard<std::mutex> lock(mu);
      if (!st.is_ok() && first.is_ok()) first = st;
    });
  for (auto& t : pool) t.join();
  return first;
}

void summarise(LoadRun& run, double percentile, double bound_ms) {
  std::vector<double> sorted = run.latency_ms;
  std::sort(sorted.begin(), sorted.end());
  run.queries = static_cast<int64_t>(sorted.size());
  if (sorted.empty()) return;
  double sum = 0;
  for (double v : sorted) sum += v;
  run.mean_ms = sum / static_cast<double>(sorted.size());
  run.p50_ms = quantile_sorted(sorted, 0.5);
  run.p90_ms = quantile_sorted(sorted, 0.9);
  run.p99_ms = quantile_sorted(sorted, 0.99);
  run.max_ms = sorted.back();
  run.percentile = percentile;
  if (run.duration_s > 0) {
    run.samples_per_s = static_cast<double>(run.samples) / run.duration_s;
    run.queries_per_s = static_cast<double>(run.queries) / run.duration_s;
  }
  if (percentile > 0) {
    const EarlyStoppingRank es = early_stopping_rank(sorted.size(), percentile);
    run.estimate_min_queries = static_cast<int64_t>(es.min_queries);
    if (es.rank > 0) {
      run.estimate_ms = sorted[es.rank - 1];
      run.overlatency = static_cast<int64_t>(es.overlatency);
    }
  }
  if (bound_ms > 0) run.meets_bound = run.estimate_ms && *run.estimate_ms <= bound_ms;
}

}  // namespace lg

namespace {

/// Single- and multi-stream: each query sent when the last completes, until both the least
/// queries and the least seconds are reached.
Expected<LoadRun> run_stream(Plan& plan, const std::vector<Tensor>& inputs, int64_t samples, int64_t min_queries,
                             double min_duration) {
  LoadRun run;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  while ((static_cast<int64_t>(run.latency_ms.size()) < min_queries || ms_between(start, last) < min_duration * 1e3) &&
         static_cast<int64_t>(run.latency_ms.size()) < kMaxQueries) {
    if (interrupted()) return Status::internal("interrupted by a signal before the run ended: no report");
    const Clock::time_point t0 = Clock::now();
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr));
    last = Clock::now();
    run.issue_ms.push_back(ms_between(start, t0));
    run.latency_ms.push_back(ms_between(t0, last));
  }
  run.samples = samples * static_cast<int64_t>(run.latency_ms.size());
  run.duration_s = ms_between(start, last) / 1e3;
  return run;
}

/// Offline: `calls` batches, every one issued at the start, taken by the workers in turn.
Expected<LoadRun> run_offline(Workers& workers, int threads, const std::vector<Tensor>& inputs,
                              int64_t samples, int64_t calls) {
  LoadRun run;
  run.issue_ms.assign(static_cast<size_t>(calls), 0.0);
  run.latency_ms.assign(static_cast<size_t>(calls), 0.0);
  std::atomic<int64_t> next{0};
  const Clock::time_point start = Clock::now();
  MOSAIC_RETURN_IF_ERROR(on_workers(workers.size(), threads, [&](size_t w) -> Status {
    for (int64_t i = next++; i < calls; i = next++) {
      if (interrupted()) return Status::internal("interrupted by a signal before the run ended: no report");
      MOSAIC_RETURN_IF_ERROR(workers[w]->run(inputs, nullptr));
      run.latency_ms[static_cast<size_t>(i)] = ms_between(start, Clock::now());  // from the start: all issued then
    }
    return Status::ok();
  }));
  run.duration_s = *std::max_element(run.latency_ms.begin(), run.latency_ms.end()) / 1e3;
  run.samples = samples * calls;
  return run;
}

}  // namespace

namespace lg {

Expected<LoadRun> run_server(size_t workers, int threads, double rate, int64_t queries, uint64_t seed, bool spin,
                             const std::function<Status(size_t w, size_t i)>& serve) {
  LoadRun run;
  run.target_rate = rate;
  std::mt19937_64 rng(seed ^ 0x5eed5eedull);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (int64_t i = 0; i < queries; ++i) {
    t += gap(rng);
    run.issue_ms.push_back(t * 1e3);
  }
  run.latency_ms.assign(static_cast<size_t>(queries), 0.0);
  std::mutex mu;
  std::condition_variable ready;
  std::deque<size_t> queue;
  // A worker spins for a while on these before it sleeps on `ready`, as a low-latency server
  // does: waking a sleeping thread costs tens to hundreds of microseconds here, which every
  // query arriving at an idle server would pay. Only while the workers leave a core free
  // (`spin`): else an idle worker's spinning would take the core a busy one needs.
  std::atomic<int64_t> pending{0};
  std::atomic<bool> issued{false}, failed{false};  // issued: every query is on the queue (or cut)
  const auto kSpin = spin ? std::chrono::milliseconds(2) : std::chrono::milliseconds(0);
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(5);
  std::vector<Clock::time_point> began(static_cast<size_t>(queries)), done(static_cast<size_t>(queries));
  Status served = Status::ok();
  std::thread serving([&] {
    served = on_workers(workers, threads, [&](size_t w) -> Status {
      for (;;) {
        const Clock::time_point spin_end = Clock::now() + kSpin;
        while (pending.load(std::memory_order_acquire) == 0 && !issued.load(std::memory_order_acquire) &&
               Clock::now() < spin_end) {
        }
        size_t i = 0;
        {
          std::unique_lock<std::mutex> lock(mu);
          ready.wait(lock, [&] { return !queue.empty() || issued; });
          if (queue.empty()) return Status::ok();
          i = queue.front();
          queue.pop_front();
          --pending;
        }
        began[i] = Clock::now();
        Status st = serve(w, i);
        if (!st.is_ok()) {
          failed = true;
          return st;
        }
        done[i] = Clock::now();
      }
    });
  });
  for (int64_t i = 0; i < queries && !failed && !interrupted(); ++i) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double, std::milli>(run.issue_ms[static_cast<size_t>(i)]));
    // In slices, so that Ctrl-C is seen during a long gap.
    while (Clock::now() < due && !interrupted())
      std::this_thread::sleep_until(std::min(due, Clock::now() + std::chrono::milliseconds(100)));
    if (interrupted()) break;
    run.max_issue_lag_ms = std::max(run.max_issue_lag_ms, ms_between(due, Clock::now()));
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(static_cast<size_t>(i));
      ++pending;
    }
    ready.notify_one();
  }
  const bool cut = interrupted();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (cut) queue.clear();
    issued = true;
  }
  ready.notify_all();
  serving.join();
  MOSAIC_RETURN_IF_ERROR(served);
  if (cut) return Status::internal("interrupted by a signal before the run ended: no report");
  Clock::time_point last = start;
  double service = 0;
  for (int64_t i = 0; i < queries; ++i) {
    const size_t k = static_cast<size_t>(i);
    run.latency_ms[k] = ms_between(start, done[k]) - run.issue_ms[k];
    run.service_ms.push_back(ms_between(began[k], done[k]));
    service += run.service_ms.back();
    last = std::max(last, done[k]);
  }
  run.mean_service_ms = service / static_cast<double>(queries);
  run.samples = queries;
  run.duration_s = ms_between(start, last) / 1e3;
  return run;
}

Expected<int64_t> server_queries(double rate, int64_t min_queries, double min_duration) {
  const double wanted = std::max(static_cast<double>(min_queries), std::ceil(rate * min_duration));
  if (wanted > static_cast<double>(kMaxQueries))
    return Status::invalid("`rate` " + fixed(rate, 2) + " for `min_duration` " + fixed(min_duration, 1) + " s: " +
                           fixed(wanted, 0) + " queries, and a run keeps at most " + std::to_string(kMaxQueries));
  if (wanted / rate > kMaxScheduleSeconds)
    return Status::invalid("`rate` " + fixed(rate, 6) + ": " + fixed(wanted, 0) + " queries at that rate take " +
                           fixed(wanted / rate / 3600, 1) + " hours; a run's schedule is at most a day");
  return static_cast<int64_t>(wanted);
}

}  // namespace lg

namespace {

/// What every scenario runs on: the workers' plans, warmed up, and the model's inputs.
struct Setup {
  Workers workers;
  std::vector<Tensor> inputs;
  int threads = 1;  ///< per worker
  int64_t min_queries = 0;
  double min_duration = 0;
};

/// Loads and fuses the model, plans it once per worker (each warmed up twice) and measures
/// one call alone (the median of three, on one worker's threads): r.service_ms.
Expected<Setup> set_up(const LoadgenOptions& o, const Scenario& sc, LoadgenReport& r) {
  const int all_threads = o.common.threads > 0 ? o.common.threads : omp_get_max_threads();
  r.threads_per_worker = std::max<int64_t>(1, all_threads / o.workers);
  if (o.workers > all_threads)
    r.notes.push_back(std::to_string(o.workers) + " workers share " + std::to_string(all_threads) +
                      " thread(s): they take turns on the cores");
  Setup s;
  s.min_queries = o.min_queries > 0 ? o.min_queries : sc.min_queries;
  s.min_duration = o.min_duration;
  s.threads = static_cast<int>(r.threads_per_worker);
  // Single-stream and server queries are one call at the model's own batch (symbolic: 1), as
  // every command binds it; multi-stream and offline bind theirs (8 unless given).
  CommonOptions c = o.common;
  if (c.batch == 0 && sc.samples > 1) c.batch = sc.samples;
  MOSAIC_ASSIGN_OR_RETURN(Graph g, load_prepared(o.model, c, nullptr));
  r.samples_per_query = 1;  // a model without inputs: one call a query
  if (!g.inputs.empty()) {
    const Shape& first = g.value_descs.at(g.inputs[0].name).shape;
    if (!first.empty()) r.samples_per_query = std::max<int64_t>(1, first[0]);
  }
  if (sc.samples == 1 && r.samples_per_query > 1)
    r.notes.push_back("the model's batch is fixed at " + std::to_string(r.samples_per_query) +
                      ": a query is one call of that many samples");
  const Placement placement = Placement::all_on(o.backend);
  if (o.fuse) fuse_graph(g, fuse_options_for(placement, builtin_registry(), false));
  MOSAIC_ASSIGN_OR_RETURN(s.inputs, model_inputs(g, c));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(s.threads));
  for (int64_t w = 0; w < o.workers; ++w) {
    auto plan = Plan::build(g, placement, builtin_registry(), PlanOptions{});
    if (!plan.ok()) return explain_unsupported(plan.status(), g);
    s.workers.push_back(std::move(plan.value()));
    for (int i = 0; i < 2; ++i) MOSAIC_RETURN_IF_ERROR(s.workers.back()->run(s.inputs, nullptr));
  }
  std::vector<double> alone;
  for (int i = 0; i < 3; ++i) {
    const Clock::time_point t0 = Clock::now();
    MOSAIC_RETURN_IF_ERROR(s.workers[0]->run(s.inputs, nullptr));
    alone.push_back(ms_between(t0, Clock::now()));
  }
  std::sort(alone.begin(), alone.end());
  r.service_ms = alone[1];
  return s;
}

/// Single-stream and multi-stream: one run, the percentile's estimate as the figure.
Status stream_scenario(const Scenario& sc, Setup& s, LoadgenReport& r) {
  MOSAIC_ASSIGN_OR_RETURN(LoadRun run, run_stream(*s.workers[0], s.inputs, r.samples_per_query, s.min_queries, s.min_duration));
  summarise(run, sc.percentile, 0);
  r.runs.push_back(std::move(run));
  const LoadRun& last = r.runs.back();
  r.metric = fixed(100 * sc.percentile, 0) + "th percentile latency (early-stopping estimate)";
  r.metric_value = last.estimate_ms;
  r.metric_unit = "ms";
  if (last.queries >= kMaxQueries)
    r.notes.push_back("stopped at " + std::to_string(kMaxQueries) + " queries, the most a run keeps");
  if (!last.estimate_ms)
    r.notes.push_back("too few queries for an early-stopping estimate: " + std::to_string(last.queries) + " of " +
                      std::to_string(last.estimate_min_queries) + " needed");
  return Status::ok();
}

/// Offline: enough calls for the least samples and, at the measured service time, the least
/// seconds; samples/s as the figure.
Status offline_scenario(const LoadgenOptions& o, Setup& s, LoadgenReport& r) {
  const double per_s = static_cast<double>(o.workers) / std::max(r.service_ms / 1e3, 1e-6);
  const double for_duration = std::ceil(per_s * s.min_duration);
  if (for_duration > static_cast<double>(kMaxQueries))
    return Status::invalid("`min_duration` " + fixed(s.min_duration, 1) + " s: at " + fixed(per_s, 0) +
                           " calls/s that is " + fixed(for_duration, 0) + " calls, and a run keeps at most " +
                           std::to_string(kMaxQueries));
  const int64_t calls = std::max<int64_t>({(s.min_queries + r.samples_per_query - 1) / r.samples_per_query,
                                           static_cast<int64_t>(for_duration), static_cast<int64_t>(o.workers)});
  MOSAIC_ASSIGN_OR_RETURN(LoadRun run, run_offline(s.workers, s.threads, s.inputs, r.samples_per_query, calls));
  summarise(run, 0, 0);
  r.runs.push_back(std::move(run));
  r.metric = "samples per second";
  r.metric_value = r.runs.back().samples_per_s;
  r.metric_unit = "samples/s";
  return Status::ok();
}

}  // namespace

namespace lg {

Status find_highest_rate(const RateSearch& s, const ServerRun& server_run, LoadgenReport& r) {
  const double capacity = std::max(s.capacity, 1e-9);
  double lo = 0, hi = 0, rate = 0.5 * capacity;
  if (!s.feasible) r.notes.push_back(s.infeasible);
  while (s.feasible && (lo == 0 || hi == 0)) {
    MOSAIC_ASSIGN_OR_RETURN(LoadRun run, server_run(rate));
    const bool met = run.meets_bound;
    r.runs.push_back(std::move(run));
    if (met) {
      lo = rate;
      rate = hi > 0 ? hi : std::min(rate * 2, capacity * 1.5);
      if (rate <= lo) break;  // met at 1.5x the capacity: no higher rate is tried
    } else {
      hi = rate;
      rate = lo > 0 ? lo : rate / 2;
      if (lo == 0 && rate < capacity / 100) break;
    }
  }
  for (int64_t step = 0; step < s.steps && lo > 0 && hi > 0; ++step) {
    const double mid = (lo + hi) / 2;
    MOSAIC_ASSIGN_OR_RETURN(LoadRun run, server_run(mid));
    (run.meets_bound ? lo : hi) = mid;
    r.runs.push_back(std::move(run));
  }
  if (lo > 0) r.max_rate = lo;
  else if (!r.runs.empty())
    r.notes.push_back("no rate tried met it: the lowest, " + fixed(r.runs.back().target_rate, 2) + "/s, " +
                      (s.missed ? s.missed(r.runs.back()) : std::string("missed")));
  return Status::ok();
}

}  // namespace lg

namespace {

/// Server: one run at `rate`, or the search for the highest rate under the bound.
Status server_scenario(const LoadgenOptions& o, const Scenario& sc, Setup& s, LoadgenReport& r) {
  const ServerRun server_run = [&](double rate) -> Expected<LoadRun> {
    MOSAIC_ASSIGN_OR_RETURN(const int64_t queries, server_queries(rate, s.min_queries, s.min_duration));
    const bool spin = o.workers < static_cast<int64_t>(std::thread::hardware_concurrency());
    MOSAIC_ASSIGN_OR_RETURN(LoadRun run, run_server(s.workers.size(), s.threads, rate, queries, o.common.seed, spin,
                                                    [&](size_t w, size_t) { return s.workers[w]->run(s.inputs, nullptr); }));
    summarise(run, sc.percentile, o.latency_bound);
    return run;
  };
  if (o.find_rate) {
    RateSearch search;
    search.capacity = static_cast<double>(o.workers) / std::max(r.service_ms / 1e3, 1e-6);
    search.steps = o.search_steps;
    search.feasible = o.latency_bound >= r.service_ms;
    search.infeasible = "the bound (" + fixed(o.latency_bound, 3) + " ms) is below one call's time alone (" +
                        fixed(r.service_ms, 3) + " ms): no rate can meet it";
    search.missed = [](const LoadRun& run) {
      return "had p99 " + (run.estimate_ms ? fixed(*run.estimate_ms, 2) + " ms" : std::string("unestimated"));
    };
    MOSAIC_RETURN_IF_ERROR(find_highest_rate(search, server_run, r));
    r.metric = "highest rate whose p99 (early-stopping estimate) met the " + fixed(o.latency_bound, 2) + " ms bound";
    r.metric_value = r.max_rate;
  } else {
    MOSAIC_ASSIGN_OR_RETURN(LoadRun run, server_run(o.rate));
    r.runs.push_back(std::move(run));
    const LoadRun& shown = r.runs.back();
    r.metric = "scheduled rate";
    r.metric_value = shown.target_rate;
    if (o.latency_bound > 0)
      r.notes.push_back(std::string(shown.meets_bound ? "met" : "did NOT meet") + " the " + fixed(o.latency_bound, 2) +
                        " ms bound on the 99th percentile");
  }
  r.metric_unit = "queries/s";
  for (const LoadRun& run : r.runs)
    if (run.max_issue_lag_ms > 5)
      r.notes.push_back("at " + fixed(run.target_rate, 2) + " queries/s a query was sent " +
                        fixed(run.max_issue_lag_ms, 1) + " ms after its scheduled time (the issuing thread was late; "
                        "its latency still counts from the schedule)");
  return Status::ok();
}

}  // namespace

const std::vector<std::string>& loadgen_scenarios() {
  static const std::vector<std::string> names{"single-stream", "multi-stream", "server", "offline"};
  return names;
}

Expected<LoadgenReport> loadgen(const LoadgenOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_options(o));
  MOSAIC_ASSIGN_OR_RETURN(const Scenario sc, scenario_of(o));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  LoadgenReport r;
  r.model = o.model;
  r.backend = o.backend;
  r.scenario = o.scenario;
  r.workers = o.workers;
  r.latency_bound = o.latency_bound;
  if (o.generate.enabled) {
    MOSAIC_RETURN_IF_ERROR(generation_scenario(o, r));
  } else {
    MOSAIC_ASSIGN_OR_RETURN(Setup s, set_up(o, sc, r));
    if (o.scenario == "single-stream" || o.scenario == "multi-stream") MOSAIC_RETURN_IF_ERROR(stream_scenario(sc, s, r));
    else if (o.scenario == "offline") MOSAIC_RETURN_IF_ERROR(offline_scenario(o, s, r));
    else MOSAIC_RETURN_IF_ERROR(server_scenario(o, sc, s, r));
  }
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  const Provenance prov = run_provenance(o.model, {{"inputs and arrivals", std::to_string(o.common.seed)}});
  r.provenance = provenance_json(prov);
  return r;
}

nlohmann::json loadgen_report_json(const LoadgenReport& r) {
  using nlohmann::json;
  json runs = json::array();
  for (const LoadRun& run : r.runs)
    runs.push_back({{"target_rate", run.target_rate > 0 ? json(run.target_rate) : json()},
                    {"queries", run.queries},
                    {"samples", run.samples},
                    {"duration_s", run.duration_s},
                    {"samples_per_s", run.samples_per_s},
                    {"queries_per_s", run.queries_per_s},
                    {"latency_ms",
                     {{"mean", run.mean_ms}, {"p50", run.p50_ms}, {"p90", run.p90_ms}, {"p99", run.p99_ms}, {"max", run.max_ms}}},
                    {"percentile", run.percentile > 0 ? json(run.percentile) : json()},
                    {"estimate_ms", run.estimate_ms ? json(*run.estimate_ms) : json()},
                    {"overlatency", run.overlatency},
                    {"estimate_min_queries", run.estimate_min_queries},
                    {"max_issue_lag_ms", run.max_issue_lag_ms},
                    {"mean_service_ms", run.mean_service_ms > 0 ? json(run.mean_service_ms) : json()},
                    {"meets_bound", r.latency_bound > 0 || run.goodput ? json(run.meets_bound) : json()},
                    {"goodput", run.goodput ? json(*run.goodput) : json()},
                    {"issue_ms", run.issue_ms},
                    {"query_latency_ms", run.latency_ms},
                    {"query_service_ms", run.service_ms.empty() ? json() : json(run.service_ms)}});
  return {{"schema", "mosaic.loadgen/1"},
          {"model", r.model},
          {"backend", r.backend},
          {"scenario", r.scenario},
          {"samples_per_query", r.samples_per_query},
          {"workers", r.workers},
          {"threads_per_worker", r.threads_per_worker},
          {"service_ms", r.service_ms},
          {"latency_bound_ms", r.latency_bound > 0 ? json(r.latency_bound) : json()},
          {"metric", {{"name", r.metric}, {"value", r.metric_value ? json(*r.metric_value) : json()}, {"unit", r.metric_unit}}},
          {"max_rate", r.max_rate ? json(*r.max_rate) : json()},
          {"runs", runs},
          {"generation", r.generation ? generation_json(*r.generation) : json()},
          {"notes", r.notes},
          {"provenance", r.provenance}};
}

}  // namespace mosaic::api
