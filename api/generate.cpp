// `api::generate` (api/generate.hpp): the options, the prompt, the token loop and its clock.
// The decoders are in generate_model.cpp (recomputing) and generate_cache.cpp (KV cache);
// the figures and the JSON in generate_report.cpp.
#include "api/generate.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "api/generate_internal.hpp"
#include "api/option_rules.hpp"
#include "backends/machine_probe.hpp"
#include "core/events.hpp"
#include "metrics/provenance.hpp"

namespace mosaic::api {

void summarise_generation(GenerateReport& r);  // generate_report.cpp
Expected<GenerateReport> generate_processes(const GenerateOptions& o);  // generate_processes.cpp

namespace gen {

/// Greedy (the first of the largest), or a seeded draw from softmax(logits / T) over the top k.
int64_t pick(const Stepper& s, int64_t b, const GenerateOptions& o, std::mt19937_64& rng) {
  if (o.temperature <= 0) {
    int64_t best = 0;
    double top = s.logit(b, 0);
    for (int64_t v = 1; v < s.vocab; ++v)
      if (const double x = s.logit(b, v); x > top) top = x, best = v;
    return best;
  }
  const auto vocab = static_cast<size_t>(s.vocab);
  if (o.top_k <= 0 || static_cast<size_t>(o.top_k) >= vocab) {
    // The whole vocabulary, in id order: no sort (sorting 50,257 ids for every row and token
    // took 10-20 ms of a GPT-2 decode step at batch 1, and that was timed as the step's).
    double top = s.logit(b, 0);
    for (int64_t v = 1; v < s.vocab; ++v) top = std::max(top, s.logit(b, v));
    std::vector<double> w(vocab);
    for (size_t v = 0; v < vocab; ++v) w[v] = std::exp((s.logit(b, static_cast<int64_t>(v)) - top) / o.temperature);
    std::discrete_distribution<size_t> draw(w.begin(), w.end());
    return static_cast<int64_t>(draw(rng));
  }
  std::vector<std::pair<double, int64_t>> c;
  c.reserve(vocab);
  for (int64_t v = 0; v < s.vocab; ++v) c.emplace_back(s.logit(b, v), v);
  const size_t k = static_cast<size_t>(o.top_k);
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k), c.end(),
                    [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
  std::vector<double> w(k);
  for (size_t i = 0; i < k; ++i) w[i] = std::exp((c[i].first - c[0].first) / o.temperature);
  std::discrete_distribution<size_t> draw(w.begin(), w.end());
  return c[draw(rng)].second;
}

Status generate_tokens(Stepper& s, const GenerateOptions& o, const std::vector<std::vector<int64_t>>& prompt,
                       std::vector<std::vector<int64_t>>& generated, std::vector<double>* token_ms,
                       int64_t* prefill_copy_ns) {
  std::vector<std::vector<int64_t>> tokens = prompt;
  generated.assign(prompt.size(), {});
  std::mt19937_64 rng(o.common.seed);
  s.begin();
  const int64_t t0 = now_ns();
  for (int64_t k = 0; k < o.new_tokens; ++k) {
    if (s.node_times) {
      s.node_times->prefill = k == 0;
      if (k > 0) ++s.node_times->decode_steps;
    }
    MOSAIC_RETURN_IF_ERROR(s.step(tokens));
    for (size_t b = 0; b < tokens.size(); ++b) {
      const int64_t next = pick(s, static_cast<int64_t>(b), o, rng);
      tokens[b].push_back(next);
      generated[b].push_back(next);
    }
    if (token_ms) token_ms->push_back(static_cast<double>(now_ns() - t0) / 1e6);
    if (k == 0 && prefill_copy_ns) *prefill_copy_ns = s.copy_ns;
  }
  return Status::ok();
}

}  // namespace gen

namespace {

Status check_options(const GenerateOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_numbers("generate", {{"prompt_tokens", static_cast<double>(o.prompt_tokens)},
                                                    {"new_tokens", static_cast<double>(o.new_tokens)},
                                                    {"temperature", o.temperature},
                                                    {"top_k", static_cast<double>(o.top_k)},
                                                    {"runs", static_cast<double>(o.runs)},
                                                    {"threads", o.common.threads}}));
  if (o.common.batch != 0) MOSAIC_RETURN_IF_ERROR(check_numbers("generate", {{"batch", static_cast<double>(o.common.batch)}}));
  for (int64_t id : o.prompt_ids)
    if (id < 0) return Status::invalid("`prompt_ids`: token ids are not negative, got " + std::to_string(id));
  constexpr int64_t kMaxPositions = (int64_t{1} << 31) - 1;  // as a bound dimension
  const int64_t prompt = o.prompt_ids.empty() ? o.prompt_tokens : static_cast<int64_t>(o.prompt_ids.size());
  if (prompt > kMaxPositions || o.new_tokens > kMaxPositions || prompt + o.new_tokens - 1 > kMaxPositions)
    return Status::invalid("`new_tokens`: the prompt's " + std::to_string(prompt) + " tokens and " +
                           std::to_string(o.new_tokens) + " new ones need more than 2^31 - 1 positions");
  if (!builtin_registry().has_backend(o.backend)) return unknown_backend(o.backend);
  MOSAIC_ASSIGN_OR_RETURN(const Precision precision, parse_precision(o.precision));
  if (const BackendInfo* info = builtin_registry().info(o.backend))
    if (const std::string why = precision_declined(*info, precision); !why.empty())
      return Status::invalid("`precision` " + o.precision + ": backend " + o.backend + " declines it: " + why);
  if (!o.common.inputs.empty())
    return Status::invalid("`input`: generate feeds the model's inputs itself (the prompt: `prompt_ids`)");
  if (!o.contexts.empty() && !o.prompt_ids.empty())
    return Status::invalid("`contexts`: each depth is a random prompt that long; give it or `prompt_ids`, not both");
  for (int64_t d : o.contexts) {
    MOSAIC_RETURN_IF_ERROR(check_numbers("generate", {{"contexts", static_cast<double>(d)}}));
    if (d + o.new_tokens - 1 > kMaxPositions)
      return Status::invalid("`contexts`: a depth of " + std::to_string(d) + " and " + std::to_string(o.new_tokens) +
                             " new tokens need more than 2^31 - 1 positions");
  }
  return Status::ok();
}

std::vector<std::vector<int64_t>> make_prompt(const GenerateOptions& o, int64_t batch, int64_t vocab) {
  std::vector<std::vector<int64_t>> p(static_cast<size_t>(batch));
  std::mt19937_64 rng(o.common.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  for (auto& row : p) {
    if (!o.prompt_ids.empty()) row = o.prompt_ids;
    else
      for (int64_t i = 0; i < o.prompt_tokens; ++i) row.push_back(id(rng));
  }
  return p;
}

/// What a decode step must read, at what rate, and its share of the machine's read bandwidth
/// (GenerateReport::bandwidth_share), measured in this process right after the timed runs: on a
/// VM whose bandwidth moves by a quarter from one minute to the next, a figure cached from
/// another sitting made shares of 113% (2026-12-07).
void measure_bandwidth_share(GenerateReport& r, const Graph& g, const GenerateOptions& o) {
  if (r.new_tokens < 2 || r.tpot_ms <= 0) return;  // no decode step
  r.step_weight_bytes = gen::step_weight_bytes(g, r.batch, gen::products_read_16bit(parse_precision(r.precision).value()));
  // Decode step k (1 .. new - 1) runs after prompt + k - 1 positions: the median step's past.
  const int64_t median_past = r.prompt_tokens + (r.new_tokens - 2) / 2;
  r.step_cache_bytes = r.interface.cache_bytes_per_token * r.batch * median_past;
  r.step_gbs = static_cast<double>(r.step_weight_bytes + r.step_cache_bytes) / (r.tpot_ms / 1e3) / 1e9;
  if (!o.peaks) return;
  r.read_bandwidth_gbs = probe_read_gbs();
  if (r.read_bandwidth_gbs > 0) r.bandwidth_share = r.step_gbs / r.read_bandwidth_gbs;
}

/// One generation setting (one context depth) on the loaded model.
Expected<GenerateReport> generate_one(const GenerateOptions& o, const Graph& g) {
  GenerateReport r;
  MOSAIC_ASSIGN_OR_RETURN(r.interface, gen::find_interface(g, o.model));
  r.model = o.model;
  r.backend = o.backend;
  r.precision = precision_name(parse_precision(o.precision).value());
  r.new_tokens = o.new_tokens;
  r.prompt_tokens = o.prompt_ids.empty() ? o.prompt_tokens : static_cast<int64_t>(o.prompt_ids.size());
  const int64_t longest = r.prompt_tokens + o.new_tokens - 1;  // the last token is picked, never run
  const bool cached = !r.interface.cache.empty();
  r.decoding = cached ? "kv-cache" : "recompute";
  auto stepper = cached ? gen::cached_stepper(o, g, r.interface, longest) : gen::recompute_stepper(o, g, r.interface, longest);
  MOSAIC_RETURN_IF_ERROR(stepper->prepare(r.prompt_tokens));  // batch and vocabulary
  r.batch = stepper->batch;
  for (int64_t id : o.prompt_ids)
    if (id >= r.interface.vocab)
      return Status::invalid("`prompt_ids`: " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(r.interface.vocab) + " (the logits' last dimension)");
  r.prompt = make_prompt(o, r.batch, r.interface.vocab);
  char sampling[96];
  std::snprintf(sampling, sizeof sampling, "temperature %g, top-k %lld, seed %llu", o.temperature,
                static_cast<long long>(o.top_k), static_cast<unsigned long long>(o.common.seed));
  r.sampling = o.temperature > 0 ? sampling : "greedy";
  // The warm-up plans every length it reaches (timed apart) and gives the tokens.
  MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*stepper, o, r.prompt, r.generated, nullptr));
  double run_ms = 0, copy_ms = 0, decode_ms = 0, decode_copy_ms = 0;
  for (int64_t i = 0; i < o.runs; ++i) {
    GenerationRun run;
    std::vector<std::vector<int64_t>> again;
    int64_t prefill_copy_ns = 0;
    MOSAIC_RETURN_IF_ERROR(gen::generate_tokens(*stepper, o, r.prompt, again, &run.token_ms, &prefill_copy_ns));
    if (run.token_ms.size() > 1) {
      decode_ms += run.token_ms.back() - run.token_ms.front();
      decode_copy_ms += static_cast<double>(stepper->copy_ns - prefill_copy_ns) / 1e6;
    }
    if (again != r.generated)
      r.notes.push_back("run " + std::to_string(i + 1) + " generated other tokens than the warm-up: " + o.backend +
                        " is not deterministic on this model");
    run_ms += run.token_ms.empty() ? 0 : run.token_ms.back();
    copy_ms += static_cast<double>(stepper->copy_ns) / 1e6;
    r.runs.push_back(std::move(run));
  }
  r.lengths = stepper->planned();
  if (o.per_node) {  // one more generation, its nodes timed (not one of the timed runs)
    gen::NodeTimes times;
    stepper->node_times = &times;
    std::vector<std::vector<int64_t>> again;
    const Status st = gen::generate_tokens(*stepper, o, r.prompt, again, nullptr);
    stepper->node_times = nullptr;
    MOSAIC_RETURN_IF_ERROR(st);
    for (const auto& [name, t] : times.by_node)
      r.nodes.push_back({name, t.op, t.prefill_ns / 1e6,
                         times.decode_steps > 0 ? t.decode_ns / 1e6 / static_cast<double>(times.decode_steps) : 0.0});
    std::stable_sort(r.nodes.begin(), r.nodes.end(), [](const NodeSplit& a, const NodeSplit& b) {
      return a.decode_ms > b.decode_ms || (a.decode_ms == b.decode_ms && a.prefill_ms > b.prefill_ms);
    });
  }
  if (cached) {
    const int64_t per_token = r.interface.cache_bytes_per_token * r.batch;
    r.cache_bytes = per_token * longest;
    char note[288];
    std::snprintf(note, sizeof note,
                  "KV cache: %lld bytes per token (%zu past inputs, batch %lld), %lld at the longest sequence; copying it "
                  "into and out of the plans took %.1f%% of the timed runs, %.1f%% of the decode steps",
                  static_cast<long long>(per_token), r.interface.cache.size(), static_cast<long long>(r.batch),
                  static_cast<long long>(r.cache_bytes), run_ms > 0 ? 100 * copy_ms / run_ms : 0.0,
                  decode_ms > 0 ? 100 * decode_copy_ms / decode_ms : 0.0);
    r.notes.push_back(note);
    r.cache_copy_share = run_ms > 0 ? copy_ms / run_ms : 0;
    r.decode_copy_share = decode_ms > 0 ? decode_copy_ms / decode_ms : 0;
  }
  summarise_generation(r);
  const Provenance prov = run_provenance(o.model, {{"prompt and sampling", std::to_string(o.common.seed)}});
  r.provenance = provenance_json(prov);
  measure_bandwidth_share(r, g, o);
  return r;
}

ContextPoint context_point(const GenerateReport& r) {
  ContextPoint p;
  p.context = r.prompt_tokens;
  p.ttft_ms = r.ttft_ms;
  p.tpot_ms = r.tpot_ms;
  p.prefill_tokens_per_s = r.prefill_tokens_per_s;
  p.decode_tokens_per_s = r.decode_tokens_per_s;
  p.itl_p50_ms = r.itl_p50_ms;
  p.itl_p99_ms = r.itl_p99_ms;
  for (const PlannedLength& l : r.lengths) p.plan_ms += l.plan_ms;
  p.cache_copy_share = r.cache_copy_share;
  p.decode_copy_share = r.decode_copy_share;
  p.step_gbs = r.step_gbs;
  p.bandwidth_share = r.bandwidth_share;
  p.runs = r.runs;
  return p;
}

}  // namespace

Expected<GenerateReport> generate(const GenerateOptions& o) {
  if (o.processes < 1) return Status::invalid("`processes` must be at least 1, got " + std::to_string(o.processes));
  MOSAIC_RETURN_IF_ERROR(check_options(o));
  if (o.processes > 1) return generate_processes(o);
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  MOSAIC_ASSIGN_OR_RETURN(Graph g, load_model(o.model));
  if (o.contexts.empty()) return generate_one(o, g);
  // A sweep: one generation per depth, the prompt that long; the report is the first depth's
  // with a point for each.
  GenerateReport first;
  for (size_t i = 0; i < o.contexts.size(); ++i) {
    GenerateOptions one = o;
    one.prompt_tokens = o.contexts[i];
    one.contexts.clear();
    MOSAIC_ASSIGN_OR_RETURN(GenerateReport r, generate_one(one, g));
    if (i == 0) first = r;
    first.contexts.push_back(context_point(r));
  }
  return first;
}

}  // namespace mosaic::api
