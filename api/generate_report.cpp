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

RunFigures run_figures(const std::vector<GenerationRun>& runs, int64_t batch, int64_t prompt_tokens) {
  std::vector<double> ttft, tpot, e2e, prefill, decode, gaps;
  const auto rows = static_cast<double>(batch);
  for (const GenerationRun& run : runs) {
    if (run.token_ms.empty()) continue;
    const double first = run.token_ms.front(), last = run.token_ms.back();
    ttft.push_back(first);
    e2e.push_back(last);
    if (first > 0) prefill.push_back(rows * static_cast<double>(prompt_tokens) / (first / 1e3));
    const auto n = static_cast<double>(run.token_ms.size());
    if (n > 1 && last > first) {
      tpot.push_back((last - first) / (n - 1));
      decode.push_back(rows * (n - 1) / ((last - first) / 1e3));
    }
    for (size_t i = 1; i < run.token_ms.size(); ++i) gaps.push_back(run.token_ms[i] - run.token_ms[i - 1]);
  }
  RunFigures f;
  f.ttft_ms = median_of(ttft);
  f.tpot_ms = median_of(tpot);
  f.e2e_ms = median_of(e2e);
  f.prefill_tokens_per_s = median_of(prefill);
  f.decode_tokens_per_s = median_of(decode);
  std::sort(gaps.begin(), gaps.end());
  if (!gaps.empty()) {
    f.itl_p50_ms = quantile_sorted(gaps, 0.5);
    f.itl_p90_ms = quantile_sorted(gaps, 0.9);
    f.itl_p99_ms = quantile_sorted(gaps, 0.99);
  }
  return f;
}

void summarise_generation(GenerateReport& r) {
  const RunFigures f = run_figures(r.runs, r.batch, r.prompt_tokens);
  r.ttft_ms = f.ttft_ms;
  r.tpot_ms = f.tpot_ms;
  r.e2e_ms = f.e2e_ms;
  r.prefill_tokens_per_s = f.prefill_tokens_per_s;
  r.decode_tokens_per_s = f.decode_tokens_per_s;
  r.itl_p50_ms = f.itl_p50_ms;
  r.itl_p90_ms = f.itl_p90_ms;
  r.itl_p99_ms = f.itl_p99_ms;
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
  json processes = json();
  if (!r.processes.empty()) {
    processes = json::array();
    for (size_t i = 0; i < r.processes.size(); ++i) {
      const ProcessFigures& p = r.processes[i];
      json depths = json();
      if (!p.contexts.empty()) {
        depths = json::array();
        for (const auto& d : p.contexts) depths.push_back({{"context", d.context}, {"ttft_ms", d.ttft_ms}, {"tpot_ms", d.tpot_ms}});
      }
      processes.push_back({{"process", i},
                           {"ttft_ms", p.ttft_ms},
                           {"tpot_ms", p.tpot_ms},
                           {"decode_tokens_per_s", p.decode_tokens_per_s},
                           {"contexts", depths}});
    }
  }
  const DecoderInterface& d = r.interface;
  return {
      {"schema", "mosaic.generate/1"},
      {"model", r.model},
      {"backend", r.backend},
      {"settings",
       {{"batch", r.batch}, {"prompt_tokens", r.prompt_tokens}, {"new_tokens", r.new_tokens}, {"sampling", r.sampling},
        {"precision", r.precision},
        {"runs", r.runs.size()}, {"processes", std::max<size_t>(1, r.processes.size())}}},
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
      {"processes", processes},  // --processes K: each process's medians; null for one process
      {"notes", r.notes},
      {"provenance", r.provenance},
  };
}

}  // namespace mosaic::api

namespace mosaic::api {

Expected<GenerateReport> generate_report_from_json(const nlohmann::json& doc) {
  using nlohmann::json;
  if (!doc.is_object() || doc.value("schema", json()) != "mosaic.generate/1")
    return Status::invalid("not a mosaic.generate/1 document");
  std::string field;  // what is being read, for the error
  auto runs_of = [&](const json& j) {
    std::vector<GenerationRun> runs;
    for (const auto& r : j) runs.push_back({r.at("token_ms").get<std::vector<double>>()});
    return runs;
  };
  auto number_or_zero = [](const json& j) { return j.is_number() ? j.get<double>() : 0.0; };
  auto text_or_empty = [](const json& j) { return j.is_string() ? j.get<std::string>() : std::string(); };
  GenerateReport r;
  try {
    field = "model";
    r.model = doc.at("model").get<std::string>();
    field = "backend";
    r.backend = doc.at("backend").get<std::string>();
    field = "settings";
    const json& st = doc.at("settings");
    r.batch = st.at("batch").get<int64_t>();
    r.prompt_tokens = st.at("prompt_tokens").get<int64_t>();
    r.new_tokens = st.at("new_tokens").get<int64_t>();
    r.sampling = st.at("sampling").get<std::string>();
    r.precision = st.value("precision", "f32");  // documents before bf16 generation: float32
    field = "decoding";
    r.decoding = doc.at("decoding").get<std::string>();
    field = "interface";
    const json& in = doc.at("interface");
    r.interface.ids = in.at("ids").get<std::string>();
    r.interface.mask = text_or_empty(in.value("attention_mask", json()));
    r.interface.positions = text_or_empty(in.value("position_ids", json()));
    r.interface.logits = in.at("logits").get<std::string>();
    r.interface.vocab = in.at("vocabulary").get<int64_t>();
    if (in.at("sequence").is_string()) r.interface.sequence_dim = in["sequence"].get<std::string>();
    else r.interface.fixed_length = in["sequence"].get<int64_t>();
    field = "cache";
    if (const json& c = doc.value("cache", json()); c.is_object()) {
      for (const auto& p : c.at("inputs")) r.interface.cache.emplace_back(p.at("past").get<std::string>(), p.at("present").get<std::string>());
      r.interface.past_dim = c.at("past_dimension").get<std::string>();
      r.interface.cache_bytes_per_token = r.batch > 0 ? c.at("bytes_per_token").get<int64_t>() / r.batch : 0;
      r.cache_bytes = c.at("bytes").get<int64_t>();
      r.cache_copy_share = c.at("copy_share").get<double>();
      r.decode_copy_share = c.at("decode_copy_share").get<double>();
    }
    field = "lengths";
    for (const auto& l : doc.at("lengths"))
      r.lengths.push_back({l.at("length").get<int64_t>(), l.at("past").get<int64_t>(), l.at("plan_ms").get<double>(),
                           l.at("padding_difference").get<double>()});
    field = "prompt";
    r.prompt = doc.at("prompt").get<std::vector<std::vector<int64_t>>>();
    field = "generated";
    r.generated = doc.at("generated").get<std::vector<std::vector<int64_t>>>();
    field = "runs";
    r.runs = runs_of(doc.at("runs"));
    field = "summary";
    const json& s = doc.at("summary");
    r.ttft_ms = s.at("ttft_ms").get<double>();
    r.tpot_ms = s.at("tpot_ms").get<double>();
    r.e2e_ms = s.at("e2e_ms").get<double>();
    r.prefill_tokens_per_s = s.at("prefill_tokens_per_s").get<double>();
    r.decode_tokens_per_s = s.at("decode_tokens_per_s").get<double>();
    r.itl_p50_ms = s.at("inter_token_ms").at("p50").get<double>();
    r.itl_p90_ms = s.at("inter_token_ms").at("p90").get<double>();
    r.itl_p99_ms = s.at("inter_token_ms").at("p99").get<double>();
    field = "bandwidth";
    if (const json& b = doc.value("bandwidth", json()); b.is_object()) {
      r.step_weight_bytes = b.at("step_weight_bytes").get<int64_t>();
      r.step_cache_bytes = b.at("step_cache_bytes").get<int64_t>();
      r.step_gbs = b.at("step_gbs").get<double>();
      r.read_bandwidth_gbs = number_or_zero(b.value("read_bandwidth_gbs", json()));
      r.bandwidth_share = number_or_zero(b.value("share", json()));
    }
    field = "nodes";
    if (const json& n = doc.value("nodes", json()); n.is_array())
      for (const auto& x : n)
        r.nodes.push_back({x.at("name").get<std::string>(), x.at("op").get<std::string>(), x.at("prefill_ms").get<double>(),
                           x.at("decode_ms").get<double>()});
    field = "contexts";
    if (const json& c = doc.value("contexts", json()); c.is_array())
      for (const auto& x : c) {
        ContextPoint p;
        p.context = x.at("context").get<int64_t>();
        p.ttft_ms = x.at("ttft_ms").get<double>();
        p.tpot_ms = x.at("tpot_ms").get<double>();
        p.prefill_tokens_per_s = x.at("prefill_tokens_per_s").get<double>();
        p.decode_tokens_per_s = x.at("decode_tokens_per_s").get<double>();
        p.itl_p50_ms = x.at("inter_token_ms").at("p50").get<double>();
        p.itl_p99_ms = x.at("inter_token_ms").at("p99").get<double>();
        p.plan_ms = x.at("plan_ms").get<double>();
        p.cache_copy_share = x.at("cache_copy_share").get<double>();
        p.decode_copy_share = x.at("decode_copy_share").get<double>();
        p.step_gbs = x.at("step_gbs").get<double>();
        p.bandwidth_share = number_or_zero(x.value("bandwidth_share", json()));
        p.runs = runs_of(x.value("runs", json::array()));
        r.contexts.push_back(std::move(p));
      }
    field = "processes";
    if (const json& ps = doc.value("processes", json()); ps.is_array())
      for (const auto& x : ps) {
        ProcessFigures f{x.at("ttft_ms").get<double>(), x.at("tpot_ms").get<double>(),
                         x.at("decode_tokens_per_s").get<double>(), {}};
        if (const json& c = x.value("contexts", json()); c.is_array())
          for (const auto& d : c)
            f.contexts.push_back({d.at("context").get<int64_t>(), d.at("ttft_ms").get<double>(), d.at("tpot_ms").get<double>()});
        r.processes.push_back(std::move(f));
      }
    field = "notes";
    r.notes = doc.value("notes", json::array()).get<std::vector<std::string>>();
    r.provenance = doc.value("provenance", json());
  } catch (const json::exception& e) {
    return Status::invalid("mosaic.generate/1 document: `" + field + "` is missing a field or has one of the wrong type (" +
                           e.what() + ")");
  }
  return r;
}

}  // namespace mosaic::api
