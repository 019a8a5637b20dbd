// Generation requests under LoadGen's server scenario (`mosaic loadgen --generate`,
// docs/loadgen.md): requests arrive at Poisson times (seeded) and are queued on schedule;
// each asks a worker's decoder (api/generate.hpp: its own plans, KV cache or recomputing) to
// continue a random prompt of a drawn length by a drawn number of tokens, greedily. The
// figures are vLLM's and MLPerf's for LLM serving: time to first token and time per output
// token counted from the request's scheduled arrival (so a queue shows), their percentiles
// with the early-stopping estimate, and goodput: the share of requests that met every bound.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <thread>

#include "api/generate_internal.hpp"
#include "api/loadgen_internal.hpp"

namespace mosaic::api::lg {
namespace {

constexpr int64_t kMaxPositions = (int64_t{1} << 31) - 1;  // as a bound dimension

/// A length distribution: uniform over [lo, hi] (lo == hi: fixed).
struct Lengths {
  int64_t lo = 0, hi = 0;
};

Expected<Lengths> parse_lengths(const std::string& key, const std::string& text) {
  auto bad = [&] {
    return Status::invalid("`" + key + "` '" + text + "': expected N or uniform:A-B, token counts from 1 to 2^31 - 1 "
                           "with A <= B");
  };
  auto number = [](const std::string& t, int64_t* v) {
    if (t.empty() || t.size() > 10 || t.find_first_not_of("0123456789") != std::string::npos) return false;
    *v = std::stoll(t);
    return *v >= 1 && *v <= kMaxPositions;
  };
  Lengths l;
  if (text.rfind("uniform:", 0) == 0) {
    const std::string range = text.substr(8);
    const size_t dash = range.find('-');
    if (dash == std::string::npos || !number(range.substr(0, dash), &l.lo) || !number(range.substr(dash + 1), &l.hi) ||
        l.lo > l.hi)
      return bad();
    return l;
  }
  if (!number(text, &l.lo)) return bad();
  l.hi = l.lo;
  return l;
}

/// Percentiles of `v` with the early-stopping estimate of p99, as a server run's latencies
/// get them (summarise).
LoadRun percentiles(std::vector<double> v) {
  LoadRun p;
  p.latency_ms = std::move(v);
  summarise(p, 0.99, 0);
  return p;
}

/// Every request's prompt and output lengths, drawn before anything runs (seeded); returns the
/// prompt lengths drawn.
std::set<int64_t> draw_requests(uint64_t seed, const Lengths& prompts, const Lengths& outputs, int64_t queries,
                                std::vector<ServedRequest>& requests) {
  std::mt19937_64 rng(seed ^ 0x6e6e5eedull);
  std::uniform_int_distribution<int64_t> prompt_len(prompts.lo, prompts.hi), output_len(outputs.lo, outputs.hi);
  requests.resize(static_cast<size_t>(queries));
  std::set<int64_t> prompt_lengths;
  for (ServedRequest& q : requests) {
    q.prompt_tokens = prompt_len(rng);
    q.new_tokens = output_len(rng);
    prompt_lengths.insert(q.prompt_tokens);
  }
  return prompt_lengths;
}

/// Each request's figures from the server run (its arrivals, end-to-end latencies and service
/// times) and its tokens' times, then the run's percentiles, goodput and rates.
void add_figures(const GenerateLoad& gl, const std::vector<double>& first_ms, const std::vector<double>& last_ms,
                 int64_t queries, LoadRun& run, GenerationServing& gs) {
  std::vector<double> ttft, tpot;
  int64_t good = 0, tokens = 0;
  for (size_t i = 0; i < gs.requests.size(); ++i) {
    ServedRequest& q = gs.requests[i];
    q.issue_ms = run.issue_ms[i];
    q.e2e_ms = run.latency_ms[i];
    q.queue_ms = std::max(0.0, run.latency_ms[i] - run.service_ms[i]);
    q.ttft_ms = q.queue_ms + first_ms[i];
    q.tpot_ms = q.new_tokens > 1 ? (last_ms[i] - first_ms[i]) / static_cast<double>(q.new_tokens - 1) : 0;
    q.good = (gl.ttft_bound <= 0 || q.ttft_ms <= gl.ttft_bound) && (gl.tpot_bound <= 0 || q.tpot_ms <= gl.tpot_bound);
    good += q.good ? 1 : 0;
    tokens += q.new_tokens;
    ttft.push_back(q.ttft_ms);
    if (q.new_tokens > 1) tpot.push_back(q.tpot_ms);
  }
  summarise(run, 0.99, 0);
  run.samples = queries;
  const LoadRun t1 = percentiles(ttft), t2 = percentiles(tpot);
  gs.ttft_p50_ms = t1.p50_ms, gs.ttft_p90_ms = t1.p90_ms, gs.ttft_p99_ms = t1.p99_ms, gs.ttft_p99_estimate_ms = t1.estimate_ms;
  gs.tpot_p50_ms = t2.p50_ms, gs.tpot_p90_ms = t2.p90_ms, gs.tpot_p99_ms = t2.p99_ms, gs.tpot_p99_estimate_ms = t2.estimate_ms;
  gs.goodput = static_cast<double>(good) / static_cast<double>(queries);
  if (run.duration_s > 0) {
    gs.requests_per_s = static_cast<double>(queries) / run.duration_s;
    gs.good_requests_per_s = static_cast<double>(good) / run.duration_s;
    gs.output_tokens_per_s = static_cast<double>(tokens) / run.duration_s;
  }
}

/// A worker: its decoder's plans for every length the requests need.
struct Decoder {
  DecoderInterface interface;
  std::unique_ptr<gen::Stepper> stepper;
};

}  // namespace

Status generation_scenario(const LoadgenOptions& o, LoadgenReport& r) {
  const GenerateLoad& gl = o.generate;
  MOSAIC_ASSIGN_OR_RETURN(const Lengths prompts, parse_lengths("prompt_tokens", gl.prompt_tokens));
  MOSAIC_ASSIGN_OR_RETURN(const Lengths outputs, parse_lengths("new_tokens", gl.new_tokens));
  if (prompts.hi + outputs.hi - 1 > kMaxPositions)
    return Status::invalid("`new_tokens`: prompts of up to " + std::to_string(prompts.hi) + " tokens and " +
                           std::to_string(outputs.hi) + " new ones need more than 2^31 - 1 positions");
  const int64_t longest = prompts.hi + outputs.hi - 1;  // the last token is picked, never run
  MOSAIC_ASSIGN_OR_RETURN(const int64_t queries, server_queries(o.rate, o.min_queries > 0 ? o.min_queries : 64,
                                                                o.min_duration));
  const int all_threads = o.common.threads > 0 ? o.common.threads : omp_get_max_threads();
  r.threads_per_worker = std::max<int64_t>(1, all_threads / o.workers);
  const int threads = static_cast<int>(r.threads_per_worker);
  if (o.workers > all_threads)
    r.notes.push_back(std::to_string(o.workers) + " workers share " + std::to_string(all_threads) +
                      " thread(s): they take turns on the cores");

  GenerationServing gs;
  gs.prompt_tokens = gl.prompt_tokens;
  gs.new_tokens = gl.new_tokens;
  gs.ttft_bound = gl.ttft_bound;
  gs.tpot_bound = gl.tpot_bound;
  const std::set<int64_t> prompt_lengths = draw_requests(o.common.seed, prompts, outputs, queries, gs.requests);

  // One decoder per worker. The warm-up plans every length a request will reach: one
  // generation from the shortest prompt to the longest sequence (it passes through every
  // bucket of the sequence or of the cached past), then a first token at each prompt length
  // drawn (with a cache, a prompt's first step is a plan of its own length).
  GenerateOptions go;
  go.model = o.model;
  go.backend = o.backend;
  go.fuse = o.fuse;
  go.common = o.common;
  go.common.batch = 1;
  go.prompt_tokens = prompts.hi;  // the longest request, as the decoders' messages name it
  go.new_tokens = outputs.hi;
  MOSAIC_RETURN_IF_ERROR(set_num_threads(threads));
  MOSAIC_ASSIGN_OR_RETURN(const Graph g, load_model(o.model));
  std::vector<Decoder> decoders(static_cast<size_t>(o.workers));
  int64_t vocab = 0;
  const Clock::time_point plan_start = Clock::now();
  for (Decoder& d : decoders) {
    MOSAIC_ASSIGN_OR_RETURN(d.interface, gen::find_interface(g, o.model));
    d.stepper = d.interface.cache.empty() ? gen::recompute_stepper(go, g, d.interface, longest)
                                          : gen::cached_stepper(go, g, d.interface, longest);
    MOSAIC_RETURN_IF_ERROR(d.stepper->prepare(prompts.hi));
    if (d.stepper->batch != 1)
      return Status::invalid(o.model + ": its batch is fixed at " + std::to_string(d.stepper->batch) +
                             "; a generation request is one sequence");
    vocab = d.interface.vocab;
    GenerateOptions warm = go;
    warm.new_tokens = longest - prompts.lo + 1;
    std::vector<std::vector<int64_t>> out;
    MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*d.stepper, warm, {std::vector<int64_t>(prompts.lo, 0)}, out, nullptr));
    warm.new_tokens = 1;
    for (int64_t p : prompt_lengths)
      MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*d.stepper, warm, {std::vector<int64_t>(p, 0)}, out, nullptr));
  }
  gs.plan_ms = ms_between(plan_start, Clock::now());
  gs.decoding = decoders[0].interface.cache.empty() ? "recompute" : "kv-cache";

  // Serving: request i's prompt is drawn from its own seed, so that any worker serves it alike.
  // Its tokens' times are kept from the generation's start; run_server gives when it arrived
  // (scheduled), how long it took from then, and how long the worker spent on it.
  std::vector<double> first_ms(gs.requests.size()), last_ms(gs.requests.size());
  const bool spin = o.workers < static_cast<int64_t>(std::thread::hardware_concurrency());
  auto serve = [&](size_t w, size_t i) -> Status {
    ServedRequest& q = gs.requests[i];
    std::mt19937_64 ids(o.common.seed + 0x9e3779b97f4a7c15ull * (i + 1));
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    std::vector<int64_t> prompt(static_cast<size_t>(q.prompt_tokens));
    for (auto& t : prompt) t = id(ids);
    GenerateOptions one = go;
    one.new_tokens = q.new_tokens;
    std::vector<std::vector<int64_t>> out;
    std::vector<double> token_ms;
    MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*decoders[w].stepper, one, {prompt}, out, &token_ms));
    first_ms[i] = token_ms.front();
    last_ms[i] = token_ms.back();
    return Status::ok();
  };
  MOSAIC_ASSIGN_OR_RETURN(LoadRun run, run_server(decoders.size(), threads, o.rate, queries, o.common.seed, spin, serve));

  add_figures(gl, first_ms, last_ms, queries, run, gs);
  r.runs.push_back(std::move(run));
  const bool bounded = gl.ttft_bound > 0 || gl.tpot_bound > 0;
  r.metric = bounded ? "goodput: the share of requests that met every bound" : "output tokens per second";
  r.metric_value = bounded ? gs.goodput : gs.output_tokens_per_s;
  r.metric_unit = bounded ? "of requests" : "tokens/s";
  r.notes.push_back("planning every length the requests reach took " + fixed(gs.plan_ms, 1) + " ms in the warm-up (" +
                    std::to_string(o.workers) + " decoder(s), " + gs.decoding + "), before the first arrival");
  r.generation = std::move(gs);
  return Status::ok();
}

nlohmann::json generation_json(const GenerationServing& g) {
  using nlohmann::json;
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(); };
  json requests = json::array();
  for (const ServedRequest& q : g.requests)
    requests.push_back({{"issue_ms", q.issue_ms}, {"prompt_tokens", q.prompt_tokens}, {"new_tokens", q.new_tokens},
                        {"queue_ms", q.queue_ms}, {"ttft_ms", q.ttft_ms}, {"tpot_ms", q.tpot_ms}, {"e2e_ms", q.e2e_ms},
                        {"good", q.good}});
  return {{"prompt_tokens", g.prompt_tokens},
          {"new_tokens", g.new_tokens},
          {"decoding", g.decoding},
          {"ttft_bound_ms", g.ttft_bound > 0 ? json(g.ttft_bound) : json()},
          {"tpot_bound_ms", g.tpot_bound > 0 ? json(g.tpot_bound) : json()},
          {"ttft_ms", {{"p50", g.ttft_p50_ms}, {"p90", g.ttft_p90_ms}, {"p99", g.ttft_p99_ms}, {"p99_estimate", opt(g.ttft_p99_estimate_ms)}}},
          {"tpot_ms", {{"p50", g.tpot_p50_ms}, {"p90", g.tpot_p90_ms}, {"p99", g.tpot_p99_ms}, {"p99_estimate", opt(g.tpot_p99_estimate_ms)}}},
          {"goodput", g.goodput},
          {"good_requests_per_s", g.good_requests_per_s},
          {"requests_per_s", g.requests_per_s},
          {"output_tokens_per_s", g.output_tokens_per_s},
          {"plan_ms", g.plan_ms},
          {"requests", requests}};
}

}  // namespace mosaic::api::lg
