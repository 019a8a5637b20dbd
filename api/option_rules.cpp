#include "api/option_rules.hpp"

#include <cmath>
#include <limits>
#include <map>

namespace mosaic::api {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

NumberRule integer_at_least(double min) {
  return {min, kInf, false, true, true, min > 0 ? "a positive integer" : "a non-negative integer"};
}
NumberRule at_least(double lo) { return {lo, kInf, false, true, false, ">= " + std::to_string(static_cast<int>(lo))}; }
NumberRule above(double lo) { return {lo, kInf, true, true, false, "> " + std::to_string(static_cast<int>(lo))}; }
NumberRule in(double lo, double hi, bool lo_open, bool hi_open, std::string text) {
  return {lo, hi, lo_open, hi_open, false, std::move(text)};
}

/// command ("" for every command) -> key -> rule.
const std::map<std::string, std::map<std::string, NumberRule>>& rules() {
  static const std::map<std::string, std::map<std::string, NumberRule>> table = {
      {"",
       {
           // sizes and counts
           {"batch", integer_at_least(1)},
           {"threads", integer_at_least(0)},
           {"warmup", integer_at_least(0)},
           {"iterations", integer_at_least(1)},
           {"repeats", integer_at_least(1)},
           {"max_iterations", integer_at_least(0)},
           {"processes", integer_at_least(1)},
           {"metrics_overhead", integer_at_least(1)},
           {"epochs", integer_at_least(1)},
           {"steps", integer_at_least(0)},
           {"steps_per_epoch", integer_at_least(0)},
           {"eval_batch", integer_at_least(1)},
           {"data_repeat", integer_at_least(1)},
           {"max_staleness", integer_at_least(0)},
           {"servers", integer_at_least(1)},
           {"sync_every", integer_at_least(1)},
           {"directions", integer_at_least(0)},
           {"elements", integer_at_least(0)},
           {"halvings", integer_at_least(0)},
           {"min_probes", integer_at_least(1)},
           {"limit", integer_at_least(0)},
           {"show", integer_at_least(1)},
           {"nodes", integer_at_least(0)},
           {"max_cells", integer_at_least(0)},
           {"max_grid", integer_at_least(1)},
           {"profile_concurrency", integer_at_least(1)},
           {"ranks_per_node", integer_at_least(1)},
           {"cores_per_node", integer_at_least(0)},
           {"predict_batch", integer_at_least(1)},
           // times, rates and tolerances
           {"max_seconds", above(0)},
           {"min_seconds", at_least(0)},
           {"target_ci", above(0)},
           {"auto_budget", above(0)},
           {"rtol", at_least(0)},
           {"atol", at_least(0)},
           {"threshold", at_least(0)},
           {"weight_decay", at_least(0)},
           {"lr", above(0)},
           {"bucket_mb", above(0)},
           {"eps", above(0)},
           {"tolerance", above(0)},
           {"compute_scale", above(0)},
           {"target_images_per_s", above(0)},
           {"momentum", in(0, 1, false, true, "in [0, 1)")},
           {"target_accuracy", in(0, 1, false, false, "in [0, 1]")},
           {"alpha", in(0, 1, true, true, "in (0, 1)")},
           {"max_mb", in(1, 4096, false, false, "in [1, 4096]")},
       }},
      // A rank of the simulated run needs a thread; optcheck's network check needs a step.
      {"simulate", {{"threads", integer_at_least(1)}}},
      {"optcheck", {{"steps", integer_at_least(1)}}},
      // Calibration rows; the percentile kept inside the range; SQNR in decibels.
      {"quantize",
       {{"samples", integer_at_least(1)},
        {"eval_samples", integer_at_least(0)},
        {"percentile", in(50, 100, false, false, "in [50, 100]")},
        {"sqnr_threshold", at_least(0)}}},
      // Prompt and new tokens, sampling, timed generations.
      {"generate",
       {{"prompt_tokens", integer_at_least(1)},
        {"new_tokens", integer_at_least(1)},
        {"temperature", at_least(0)},
        {"top_k", integer_at_least(0)},
        {"runs", integer_at_least(1)},
        {"contexts", integer_at_least(1)}}},
      // Serving scenarios: counts and seconds (0: the scenario's default), a rate and a bound
      // (0: none given), the search's halvings, the plans serving at once.
      {"loadgen",
       {{"min_queries", integer_at_least(0)},
        {"min_duration", at_least(0)},
        {"rate", at_least(0)},
        {"latency_bound", at_least(0)},
        {"ttft_bound", at_least(0)},
        {"tpot_bound", at_least(0)},
        {"search_steps", integer_at_least(0)},
        {"workers", {1, 256, false, false, true, "an integer in [1, 256]"}}}},
  };
  return table;
}

std::string shown(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

const NumberRule* number_rule(const std::string& command, const std::string& key) {
  for (const std::string& c : {command, std::string()}) {
    const auto cmd = rules().find(c);
    if (cmd == rules().end()) continue;
    const auto r = cmd->second.find(key);
    if (r != cmd->second.end()) return &r->second;
  }
  return nullptr;
}

std::string number_problem(const std::string& command, const std::string& key, double v) {
  const NumberRule* r = number_rule(command, key);
  if (!std::isfinite(v)) return "must be a finite number, got " + shown(v);
  if (!r) return "";
  const bool below = r->lo_open ? v <= r->lo : v < r->lo;
  const bool over = r->hi_open ? v >= r->hi : v > r->hi;
  if (below || over || (r->integer && v != std::floor(v))) return "must be " + r->text + ", got " + shown(v);
  return "";
}

std::string option_key(const std::string& flag) {
  std::string name = flag.substr(flag.rfind(',') == std::string::npos ? 0 : flag.rfind(',') + 1);
  size_t i = 0;
  while (i < name.size() && name[i] == '-') ++i;
  name = name.substr(i);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

Status check_numbers(const std::string& command, const std::vector<std::pair<std::string, double>>& values) {
  for (const auto& [key, v] : values)
    if (std::string why = number_problem(command, key, v); !why.empty())
      return Status::invalid("`" + key + "` " + why);
  return Status::ok();
}

}  // namespace mosaic::api
