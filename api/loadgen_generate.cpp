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
#include <map>
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

/// The requests, the workers' decoders and the runs at each rate of one `--generate` scenario.
class GenerationServer {
 public:
  GenerationServer(const LoadgenOptions& o, const Lengths& prompts, const Lengths& outputs, int threads)
      : o_(o), gl_(o.generate), prompts_(prompts), outputs_(outputs), threads_(threads),
        min_queries_(o.min_queries > 0 ? o.min_queries : 64) {
    gs_.prompt_tokens = gl_.prompt_tokens;
    gs_.new_tokens = gl_.new_tokens;
    gs_.ttft_bound = gl_.ttft_bound;
    gs_.tpot_bound = gl_.tpot_bound;
    go_.model = o.model;
    go_.backend = o.backend;
    go_.fuse = o.fuse;
    go_.common = o.common;
    go_.common.batch = 1;
    go_.prompt_tokens = prompts.hi;  // the longest request, as the decoders' messages name it
    go_.new_tokens = outputs.hi;
  }

  /// Draws `queries` requests (a search draws more once it knows the capacity; each rate serves
  /// the first server_queries(rate) of them) and plans every length they reach on each worker's
  /// decoder: one generation from the shortest prompt to the longest sequence (it passes
  /// through every bucket of the sequence or of the cached past), then a first token at each
  /// prompt length drawn (with a cache, a prompt's first step is a plan of its own length).
  Status set_up(const Graph& g, int64_t queries) {
    queries_ = queries;
    const std::set<int64_t> lengths = draw_requests(o_.common.seed, prompts_, outputs_, queries_, gs_.requests);
    const int64_t longest = prompts_.hi + outputs_.hi - 1;  // the last token is picked, never run
    decoders_.resize(static_cast<size_t>(o_.workers));
    const Clock::time_point plan_start = Clock::now();
    for (Decoder& d : decoders_) {
      MOSAIC_ASSIGN_OR_RETURN(d.interface, gen::find_interface(g, o_.model));
      d.stepper = d.interface.cache.empty() ? gen::recompute_stepper(go_, g, d.interface, longest)
                                            : gen::cached_stepper(go_, g, d.interface, longest);
      MOSAIC_RETURN_IF_ERROR(d.stepper->prepare(prompts_.hi));
      if (d.stepper->batch != 1)
        return Status::invalid(o_.model + ": its batch is fixed at " + std::to_string(d.stepper->batch) +
                               "; a generation request is one sequence");
      vocab_ = d.interface.vocab;
      GenerateOptions warm = go_;
      warm.new_tokens = longest - prompts_.lo + 1;
      std::vector<std::vector<int64_t>> out;
      MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*d.stepper, warm, {std::vector<int64_t>(prompts_.lo, 0)}, out, nullptr));
    }
    MOSAIC_RETURN_IF_ERROR(plan_prompts(lengths));
    gs_.plan_ms = ms_between(plan_start, Clock::now());
    gs_.decoding = decoders_[0].interface.cache.empty() ? "recompute" : "kv-cache";
    return Status::ok();
  }

  /// One run at `rate`: the requests served, their figures (kept by rate), and whether the
  /// share of good ones reached the goodput target.
  Expected<LoadRun> run_at(double rate) {
    int64_t n = queries_;
    if (o_.find_rate) {
      MOSAIC_ASSIGN_OR_RETURN(n, server_queries(rate, min_queries_, o_.min_duration));
    }
    n = std::min(n, queries_);
    first_ms_.assign(static_cast<size_t>(n), 0.0);
    last_ms_.assign(static_cast<size_t>(n), 0.0);
    const bool spin = o_.workers < static_cast<int64_t>(std::thread::hardware_concurrency());
    MOSAIC_ASSIGN_OR_RETURN(LoadRun run, run_server(decoders_.size(), threads_, rate, n, o_.common.seed, spin,
                                                    [this](size_t w, size_t i) { return serve(w, i); }));
    GenerationServing at = gs_;
    at.requests.resize(static_cast<size_t>(n));
    add_figures(gl_, first_ms_, last_ms_, n, run, at);
    run.goodput = at.goodput;
    run.meets_bound = at.goodput >= gl_.goodput_target;
    served_[rate] = std::move(at);
    return run;
  }

  /// The highest rate whose goodput reaches the target (find_highest_rate), from the capacity
  /// one request of the lengths' means alone implies; r.generation gets that rate's figures
  /// (the last rate's where none reached it).
  Status search(LoadgenReport& r) {
    GenerateOptions one = go_;
    one.new_tokens = (outputs_.lo + outputs_.hi) / 2;
    std::vector<std::vector<int64_t>> out;
    std::vector<double> t;
    const std::vector<int64_t> prompt(static_cast<size_t>((prompts_.lo + prompts_.hi) / 2), 0);
    MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*decoders_[0].stepper, one, {prompt}, out, &t));
    const double tpot = one.new_tokens > 1 ? (t.back() - t.front()) / static_cast<double>(one.new_tokens - 1) : 0;
    RateSearch s;
    s.capacity = static_cast<double>(decoders_.size()) / (std::max(t.back(), 1e-3) / 1e3);
    s.steps = o_.search_steps;
    s.feasible = (gl_.ttft_bound <= 0 || gl_.ttft_bound >= t.front()) && (gl_.tpot_bound <= 0 || gl_.tpot_bound >= tpot);
    s.infeasible = "a request of the lengths' means alone misses a bound (TTFT " + fixed(t.front(), 2) + " ms, TPOT " +
                   fixed(tpot, 2) + " ms): no rate can reach the goodput target";
    s.missed = [](const LoadRun& run) { return "had goodput " + fixed(100 * run.goodput.value_or(0), 1) + "%"; };
    // Enough requests for the highest rate the search may try, their new prompt lengths planned.
    MOSAIC_ASSIGN_OR_RETURN(queries_, server_queries(1.5 * s.capacity, min_queries_, o_.min_duration));
    MOSAIC_RETURN_IF_ERROR(plan_prompts(draw_requests(o_.common.seed, prompts_, outputs_, queries_, gs_.requests)));
    MOSAIC_RETURN_IF_ERROR(find_highest_rate(s, [this](double rate) { return run_at(rate); }, r));
    auto shown = r.max_rate ? served_.find(*r.max_rate) : served_.end();
    if (shown == served_.end() && !r.runs.empty()) shown = served_.find(r.runs.back().target_rate);
    if (shown != served_.end()) r.generation = shown->second;
    return Status::ok();
  }

  GenerationServing& figures_at(double rate) { return served_.at(rate); }
  const GenerationServing& setup() const { return gs_; }

 private:
  /// A first token at each prompt length not planned yet, on every decoder.
  Status plan_prompts(const std::set<int64_t>& lengths) {
    GenerateOptions first = go_;
    first.new_tokens = 1;
    std::vector<std::vector<int64_t>> out;
    for (int64_t p : lengths) {
      if (!planned_.insert(p).second) continue;
      for (Decoder& d : decoders_)
        MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*d.stepper, first, {std::vector<int64_t>(static_cast<size_t>(p), 0)}, out, nullptr));
    }
    return Status::ok();
  }

  /// Request i on worker w: its prompt drawn from its own seed, so that any worker serves it
  /// alike; its tokens' times from the generation's start.
  Status serve(size_t w, size_t i) {
    const ServedRequest& q = gs_.requests[i];
    std::mt19937_64 ids(o_.common.seed + 0x9e3779b97f4a7c15ull * (i + 1));
    std::uniform_int_distribution<int64_t> id(0, vocab_ - 1);
    std::vector<int64_t> prompt(static_cast<size_t>(q.prompt_tokens));
    for (auto& t : prompt) t = id(ids);
    GenerateOptions one = go_;
    one.new_tokens = q.new_tokens;
    std::vector<std::vector<int64_t>> out;
    std::vector<double> token_ms;
    MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*decoders_[w].stepper, one, {prompt}, out, &token_ms));
    first_ms_[i] = token_ms.front();
    last_ms_[i] = token_ms.back();
    return Status::ok();
  }

  const LoadgenOptions& o_;
  const GenerateLoad& gl_;
  const Lengths prompts_, outputs_;
  const int threads_;
  const int64_t min_queries_;
  int64_t queries_ = 0, vocab_ = 0;
  GenerateOptions go_;
  GenerationServing gs_;
  std::vector<Decoder> decoders_;
  std::set<int64_t> planned_;
  std::vector<double> first_ms_, last_ms_;
  std::map<double, GenerationServing> served_;
};

}  // namespace

Status generation_scenario(const LoadgenOptions& o, LoadgenReport& r) {
  const GenerateLoad& gl = o.generate;
  MOSAIC_ASSIGN_OR_RETURN(const Lengths prompts, parse_lengths("prompt_tokens", gl.prompt_tokens));
  MOSAIC_ASSIGN_OR_RETURN(const Lengths outputs, parse_lengths("new_tokens", gl.new_tokens));
  if (prompts.hi + outputs.hi - 1 > kMaxPositions)
    return Status::invalid("`new_tokens`: prompts of up to " + std::to_string(prompts.hi) + " tokens and " +
                           std::to_string(outputs.hi) + " new ones need more than 2^31 - 1 positions");
  int64_t queries = o.min_queries > 0 ? o.min_queries : 64;
  if (!o.find_rate) {
    MOSAIC_ASSIGN_OR_RETURN(queries, server_queries(o.rate, queries, o.min_duration));
  }
  const int all_threads = o.common.threads > 0 ? o.common.threads : omp_get_max_threads();
  r.threads_per_worker = std::max<int64_t>(1, all_threads / o.workers);
  const int threads = static_cast<int>(r.threads_per_worker);
  if (o.workers > all_threads)
    r.notes.push_back(std::to_string(o.workers) + " workers share " + std::to_string(all_threads) +
                      " thread(s): they take turns on the cores");
  MOSAIC_RETURN_IF_ERROR(set_num_threads(threads));
  MOSAIC_ASSIGN_OR_RETURN(const Graph g, load_model(o.model));
  GenerationServer server(o, prompts, outputs, threads);
  MOSAIC_RETURN_IF_ERROR(server.set_up(g, queries));
  if (o.find_rate) {
    MOSAIC_RETURN_IF_ERROR(server.search(r));
    r.metric = "highest request rate whose goodput reached " + fixed(100 * gl.goodput_target, 1) +
               "% (requests meeting every bound)";
    r.metric_value = r.max_rate;
    r.metric_unit = "requests/s";
  } else {
    MOSAIC_ASSIGN_OR_RETURN(LoadRun run, server.run_at(o.rate));
    r.runs.push_back(std::move(run));
    r.generation = server.figures_at(o.rate);
    const bool bounded = gl.ttft_bound > 0 || gl.tpot_bound > 0;
    r.metric = bounded ? "goodput: the share of requests that met every bound" : "output tokens per second";
    r.metric_value = bounded ? r.generation->goodput : r.generation->output_tokens_per_s;
    r.metric_unit = bounded ? "of requests" : "tokens/s";
  }
  if (!r.generation) r.generation = server.setup();
  r.notes.push_back("planning every length the requests reach took " + fixed(server.setup().plan_ms, 1) +
                    " ms in the warm-up (" + std::to_string(o.workers) + " decoder(s), " + server.setup().decoding +
                    "), before the first arrival");
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
