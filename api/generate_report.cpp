// The figures of a generation (api/generate.hpp) and its JSON, mosaic.generate/1.
#include <algorithm>

#include "api/generate.hpp"
#include "metrics/stats.hpp"

namespace mosaic::api {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

}  // namespace

void summarise_generation(GenerateReport& r) {
  std::vector<double> ttft, tpot, e2e, prefill, decode, gaps;
  const auto rows = static_cast<double>(r.batch);
  for (const GenerationRun& run : r.runs) {
    if (run.token_ms.empty()) continue;
    const double first = run.token_ms.front(), last = run.token_ms.back();
    ttft.push_back(first);
    e2e.push_back(last);
    if (first > 0) prefill.push_back(rows * static_cast<double>(r.prompt_tokens) / (first / 1e3));
    const auto n = static_cast<double>(run.token_ms.size());
    if (n > 1 && last > first) {
      tpot.push_back((last - first) / (n - 1));
      decode.push_back(rows * (n - 1) / ((last - first) / 1e3));
    }
    for (size_t i = 1; i < run.token_ms.size(); ++i) gaps.push_back(run.token_ms[i] - run.token_ms[i - 1]);
  }
  r.ttft_ms = median_of(ttft);
  r.tpot_ms = median_of(tpot);
  r.e2e_ms = median_of(e2e);
  r.prefill_tokens_per_s = median_of(prefill);
  r.decode_tokens_per_s = median_of(decode);
  std::sort(gaps.begin(), gaps.end());
  if (!gaps.empty()) {
    r.itl_p50_ms = quantile_sorted(gaps, 0.5);
    r.itl_p90_ms = quantile_sorted(gaps, 0.9);
    r.itl_p99_ms = quantile_sorted(gaps, 0.99);
  }
  double plan_ms = 0;
  for (const PlannedLength& l : r.lengths) plan_ms += l.plan_ms;
  r.notes.push_back("planning: " + std::to_string(r.lengths.size()) + " length(s), " +
                    std::to_string(static_cast<long long>(plan_ms + 0.5)) +
                    " ms in all, in the warm-up; the timed runs plan nothing");
}

nlohmann::json generate_report_json(const GenerateReport& r) {
  using nlohmann::json;
  json lengths = json::array();
  for (const PlannedLength& l : r.lengths)
    lengths.push_back({{"length", l.length}, {"past", l.past}, {"plan_ms", l.plan_ms}, {"padding_difference", l.causal_diff}});
  json cache = json();
  if (!r.interface.cache.empty()) {
    json pairs = json::array();
    for (const auto& [past, present] : r.interface.cache) pairs.push_back({{"past", past}, {"present", present}});
    cache = {{"inputs", pairs},
             {"past_dimension", r.interface.past_dim},
             {"bytes_per_token", r.interface.cache_bytes_per_token * r.batch},
             {"bytes", r.cache_bytes},
             {"copy_share", r.cache_copy_share},
             {"decode_copy_share", r.decode_copy_share}};
  }
  json nodes = json();
  if (!r.nodes.empty()) {
    nodes = json::array();
    for (const NodeSplit& n : r.nodes)
      nodes.push_back({{"name", n.name}, {"op", n.op}, {"prefill_ms", n.prefill_ms}, {"decode_ms", n.decode_ms}});
  }
  auto runs_json = [](const std::vector<GenerationRun>& runs) {
    json j = json::array();
    for (const GenerationRun& run : runs) j.push_back({{"token_ms", run.token_ms}});
    return j;
  };
  json contexts = json();
  if (!r.contexts.empty()) {
    contexts = json::array();
    for (const ContextPoint& p : r.contexts)
      contexts.push_back({{"context", p.context},
                          {"ttft_ms", p.ttft_ms},
                          {"tpot_ms", p.tpot_ms},
                          {"prefill_tokens_per_s", p.prefill_tokens_per_s},
                          {"decode_tokens_per_s", p.decode_tokens_per_s},
                          {"inter_token_ms", {{"p50", p.itl_p50_ms}, {"p99", p.itl_p99_ms}}},
                          {"plan_ms", p.plan_ms},
                          {"cache_copy_share", p.cache_copy_share},
                          {"decode_copy_share", p.decode_copy_share},
                          {"step_gbs", p.step_gbs},
                          {"bandwidth_share", p.bandwidth_share > 0 ? json(p.bandwidth_share) : json()},
                          {"runs", runs_json(p.runs)}});
  }
  const DecoderInterface& d = r.interface;
  return {
      {"schema", "mosaic.generate/1"},
      {"model", r.model},
      {"backend", r.backend},
      {"settings",
       {{"batch", r.batch}, {"prompt_tokens", r.prompt_tokens}, {"new_tokens", r.new_tokens}, {"sampling", r.sampling},
        {"runs", r.runs.size()}}},
      {"decoding", r.decoding},  // "recompute" (the whole sequence each token) or "kv-cache"
      {"cache", cache},
      {"contexts", contexts},
      {"nodes", nodes},  // --per-node: each node's prefill time and mean decode-step time; null without  // a --context sweep's points (the rest is the first depth's); null without one
      // What a decode step must read over its time, against the machine's read bandwidth.
      {"bandwidth",
       r.step_weight_bytes > 0
           ? json{{"step_weight_bytes", r.step_weight_bytes},
                  {"step_cache_bytes", r.step_cache_bytes},
                  {"step_gbs", r.step_gbs},
                  {"read_bandwidth_gbs", r.read_bandwidth_gbs > 0 ? json(r.read_bandwidth_gbs) : json()},
                  {"share", r.read_bandwidth_gbs > 0 ? json(r.bandwidth_share) : json()}}
           : json()},
      {"interface",
       {{"ids", d.ids},
        {"attention_mask", d.mask.empty() ? json() : json(d.mask)},
        {"position_ids", d.positions.empty() ? json() : json(d.positions)},
        {"logits", d.logits},
        {"vocabulary", d.vocab},
        {"sequence", d.sequence_dim.empty() ? json(d.fixed_length) : json(d.sequence_dim)}}},
      {"lengths", lengths},
      {"prompt", r.prompt},
      {"generated", r.generated},
      {"summary",
       {{"ttft_ms", r.ttft_ms},
        {"tpot_ms", r.tpot_ms},
        {"e2e_ms", r.e2e_ms},
        {"prefill_tokens_per_s", r.prefill_tokens_per_s},
        {"decode_tokens_per_s", r.decode_tokens_per_s},
        {"inter_token_ms", {{"p50", r.itl_p50_ms}, {"p90", r.itl_p90_ms}, {"p99", r.itl_p99_ms}}}}},
      {"runs", runs_json(r.runs)},
      {"notes", r.notes},
      {"provenance", r.provenance},
  };
}

}  // namespace mosaic::api
