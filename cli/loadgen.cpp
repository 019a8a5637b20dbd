// `mosaic loadgen`: MLPerf LoadGen's scenarios on a model (api/loadgen.hpp).
#include <cstdio>
#include <string>

#include "api/loadgen.hpp"
#include "cli/cli_util.hpp"
#include "cli/flags.hpp"
#include "ir/file_io.hpp"

namespace mosaic::cli {
namespace {

void print_run(const api::LoadRun& run, double bound) {
  std::string estimate = "-";
  if (run.estimate_ms) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3f (%lld above)", *run.estimate_ms, static_cast<long long>(run.overlatency));
    estimate = buf;
  } else if (run.percentile > 0) {
    estimate = "too few (" + std::to_string(run.queries) + " of " + std::to_string(run.estimate_min_queries) + ")";
  }
  char rate[32] = "-";
  if (run.target_rate > 0) std::snprintf(rate, sizeof rate, "%.2f", run.target_rate);
  char service[32] = "";
  if (run.mean_service_ms > 0) std::snprintf(service, sizeof service, "%.3f", run.mean_service_ms);
  std::printf("%10s %8lld %9.1f %11.1f %9.3f %9.3f %9.3f %9.3f  %-22s %9s %s\n", rate, static_cast<long long>(run.queries),
              run.duration_s, run.samples_per_s, run.mean_ms, run.p50_ms, run.p90_ms, run.p99_ms, estimate.c_str(),
              service, bound > 0 ? (run.meets_bound ? "met" : "NOT met") : "");
}

void print_generation(const api::LoadgenReport& r) {
  const api::GenerationServing& g = *r.generation;
  if (r.runs.empty()) {
    for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
    return;
  }
  // A search: every rate tried, then the figures at the highest that reached the target.
  const api::LoadRun* shown = &r.runs.back();
  if (r.max_rate) {
    std::printf("%12s %9s %9s %9s  %s\n", "rate req/s", "requests", "seconds", "goodput", "target");
    for (const api::LoadRun& run : r.runs) {
      std::printf("%12.3f %9lld %9.1f %8.1f%%  %s\n", run.target_rate, static_cast<long long>(run.queries), run.duration_s,
                  100 * run.goodput.value_or(0), run.meets_bound ? "reached" : "NOT reached");
      if (run.target_rate == *r.max_rate) shown = &run;
    }
  }
  if (r.metric_value) std::printf("%s: %.4g %s\n", r.metric.c_str(), *r.metric_value, r.metric_unit.c_str());
  const api::LoadRun& run = *shown;
  std::printf("loadgen %s on %s: generation requests (%s) at %.2f/s, %lld worker(s) x %lld thread(s); prompts %s "
              "tokens, outputs %s\n",
              r.model.c_str(), r.backend.c_str(), g.decoding.c_str(), run.target_rate,
              static_cast<long long>(r.workers), static_cast<long long>(r.threads_per_worker), g.prompt_tokens.c_str(),
              g.new_tokens.c_str());
  auto est = [](const std::optional<double>& v) {
    char buf[32] = "-";
    if (v) std::snprintf(buf, sizeof buf, "%.3f", *v);
    return std::string(buf);
  };
  std::printf("%-12s %9s %9s %9s %13s\n", "ms", "p50", "p90", "p99", "p99 estimate");
  std::printf("%-12s %9.3f %9.3f %9.3f %13s\n", "TTFT", g.ttft_p50_ms, g.ttft_p90_ms, g.ttft_p99_ms,
              est(g.ttft_p99_estimate_ms).c_str());
  std::printf("%-12s %9.3f %9.3f %9.3f %13s\n", "TPOT", g.tpot_p50_ms, g.tpot_p90_ms, g.tpot_p99_ms,
              est(g.tpot_p99_estimate_ms).c_str());
  std::printf("%-12s %9.3f %9.3f %9.3f %13s\n", "end to end", run.p50_ms, run.p90_ms, run.p99_ms,
              est(run.estimate_ms).c_str());
  std::printf("%lld requests in %.1f s: %.2f requests/s, %.1f output tokens/s", static_cast<long long>(run.queries),
              run.duration_s, g.requests_per_s, g.output_tokens_per_s);
  auto bound = [](double b) {
    char buf[32] = "any";
    if (b > 0) std::snprintf(buf, sizeof buf, "%g ms", b);
    return std::string(buf);
  };
  if (g.ttft_bound > 0 || g.tpot_bound > 0)
    std::printf("; goodput %.1f%% (%.2f good requests/s) under TTFT <= %s and TPOT <= %s", 100 * g.goodput,
                g.good_requests_per_s, bound(g.ttft_bound).c_str(), bound(g.tpot_bound).c_str());
  std::printf("\n(TTFT and end to end count from each request's scheduled arrival)\n");
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
}

void print_report(const api::LoadgenReport& r) {
  if (r.generation) return print_generation(r);
  std::printf("loadgen %s on %s: %s, %lld sample(s) per query, %lld worker(s) x %lld thread(s); one call alone %.3f ms\n",
              r.model.c_str(), r.backend.c_str(), r.scenario.c_str(), static_cast<long long>(r.samples_per_query),
              static_cast<long long>(r.workers), static_cast<long long>(r.threads_per_worker), r.service_ms);
  const char* pct = r.scenario == "single-stream" ? "p90 estimate" : r.scenario == "offline" ? "" : "p99 estimate";
  std::printf("%10s %8s %9s %11s %9s %9s %9s %9s  %-22s %9s %s\n", "rate q/s", "queries", "seconds", "samples/s",
              "mean ms", "p50 ms", "p90 ms", "p99 ms", pct, r.scenario == "server" ? "model ms" : "",
              r.latency_bound > 0 ? "bound" : "");
  for (const api::LoadRun& run : r.runs) print_run(run, r.latency_bound);
  if (r.metric_value) std::printf("%s: %.4g %s\n", r.metric.c_str(), *r.metric_value, r.metric_unit.c_str());
  else std::printf("%s: none\n", r.metric.c_str());
  if (r.scenario == "server")
    std::printf("(latency counts from each query's scheduled arrival; `model ms`: a query's mean time in the model "
                "once a worker took it, against %.3f ms alone)\n", r.service_ms);
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
}

struct LoadgenFlags {
  api::LoadgenOptions o;
  api::DbOptions db;
  std::string json;

  CLI::App* add(CLI::App& app) {
    auto* cmd = app.add_subcommand("loadgen", "MLPerf LoadGen's serving scenarios on a model: single-stream, "
                                              "multi-stream, server (Poisson arrivals, a latency bound) and offline");
    cmd->add_option("model", o.model, "ONNX file, or zoo:NAME")->required();
    cmd->add_option("--scenario", o.scenario, "single-stream, multi-stream, server or offline")->required();
    cmd->add_option("--backend", o.backend, "where the model runs")->capture_default_str();
    cmd->add_option("--rate", o.rate, "server: queries per second, arriving at random (Poisson)");
    cmd->add_option("--latency-bound", o.latency_bound, "server: the bound on the 99th percentile of latency, ms");
    cmd->add_flag("--find-rate", o.find_rate, "server: search for the highest rate whose p99 meets --latency-bound "
                                              "(with --generate: whose goodput reaches --goodput-target)");
    cmd->add_option("--search-steps", o.search_steps, "server search: halvings after the first bracket")
        ->capture_default_str();
    cmd->add_option("--workers", o.workers, "server and offline: plans serving queries at once (the threads are "
                                            "split among them)")
        ->capture_default_str();
    cmd->add_option("--min-queries", o.min_queries, "at least this many queries (offline: samples); default: the "
                                                    "scenario's (64 single-stream and offline, 662 otherwise)");
    cmd->add_option("--min-duration", o.min_duration, "and at least this many seconds")->capture_default_str();
    cmd->add_flag("--generate", o.generate.enabled, "server: each query is a generation request (a random prompt "
                                                   "continued greedily by a decoder, docs/generation.md); figures: "
                                                   "TTFT, TPOT, goodput");
    cmd->add_option("--prompt-tokens", o.generate.prompt_tokens, "--generate: prompt lengths, N or uniform:A-B")
        ->capture_default_str();
    cmd->add_option("--new-tokens", o.generate.new_tokens, "--generate: output lengths, N or uniform:A-B")
        ->capture_default_str();
    cmd->add_option("--ttft-bound", o.generate.ttft_bound, "--generate: the bound on time to first token, ms from "
                                                           "the scheduled arrival (goodput counts the requests within)");
    cmd->add_option("--tpot-bound", o.generate.tpot_bound, "--generate: the bound on time per output token, ms");
    cmd->add_option("--goodput-target", o.generate.goodput_target, "--generate --find-rate: the share of requests "
                                                                   "that must meet every bound")
        ->capture_default_str();
    cmd->add_flag("--no-fuse{false}", o.fuse, "plan the graph as loaded, without bench's fusions");
    cmd->add_option("--json", json, "write the report as JSON (mosaic.loadgen/1), every query's issue time and "
                                    "latency included");
    add_db(cmd, db);
    CommonHelp help;
    help.batch = "samples per query (multi-stream, default 8) or per call (offline, default 8); single-stream and "
                 "server queries are one sample";
    help.threads = "threads in all, split among the workers (default: all cores)";
    help.seed = "seed of the random inputs and of the server's arrivals";
    add_common(cmd, o.common, help);
    return cmd;
  }

  int run() {
    if (Status st = check_output_paths({{"--json", json}}); !st.is_ok()) return fail(st);
    auto store = open_run_store(db);
    if (!store.ok()) return fail(store.status());
    auto r = api::loadgen(o);
    if (!r.ok()) return fail(r.status());
    print_report(r.value());
    const nlohmann::json doc = api::loadgen_report_json(r.value());
    if (!json.empty())
      if (Status st = write_file_atomic(json, doc.dump(2) + "\n"); !st.is_ok()) return fail(st);
    if (Status st = record_run(store.value().get(), doc); !st.is_ok()) return fail(st);
    return 0;
  }
};

}  // namespace

Command add_loadgen_command(CLI::App& app) { return make_command<LoadgenFlags>(app); }

}  // namespace mosaic::cli
