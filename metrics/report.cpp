#include "metrics/report.hpp"

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mosaic {

std::string format_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

ConfigReport make_config_report(const std::string& label, const Plan& plan, const BenchResult& r, int64_t batch) {
  ConfigReport c;
  c.label = label;
  c.placement = plan.placement().str();
  std::vector<const NodeStats*> by_step(plan.steps().size(), nullptr);
  for (const auto& n : r.nodes) by_step[n.step] = &n;
  for (size_t s = 0; s < plan.steps().size(); ++s) {
    const PlanStep& st = plan.steps()[s];
    const Node& node = plan.node(st);
    NodeRow row;
    row.name = node.name;
    row.op = node.op_type;
    row.backend = st.backend;
    row.requested = st.requested;
    row.fallback_reason = st.fallback_reason;
    row.view = st.alias;
    row.output_shape = st.out.empty() || st.out[0] < 0 ? "" : shape_str(plan.values()[st.out[0]].desc.shape);
    row.flops = st.flops;
    row.output_bytes = static_cast<int64_t>(st.out_bytes);
    row.workspace_bytes = static_cast<int64_t>(st.kernel->workspace_bytes());
    if (by_step[s]) {
      row.median_us = by_step[s]->median_ns / 1e3;
      row.min_us = by_step[s]->min_ns / 1e3;
      row.backward_us = by_step[s]->backward_median_ns / 1e3;
      row.gflops = row.median_us > 0 ? row.flops / (row.median_us * 1e3) : 0;
      row.share = r.kernel_sum_median_ns > 0
                      ? (by_step[s]->median_ns + by_step[s]->backward_median_ns) / r.kernel_sum_median_ns
                      : 0;
    }
    c.total_flops += row.flops;
    c.nodes.push_back(row);
  }
  c.warmup = r.warmup_done;
  c.measured = r.measured;
  c.repeats = static_cast<int>(r.repeat_median_ns.size());
  c.budget_hit = r.budget_hit;
  c.median_ms = r.median_ns / 1e6;
  c.min_ms = r.min_ns / 1e6;
  c.kernel_ms = r.kernel_sum_median_ns / 1e6;
  c.forward_ms = r.forward_ms;
  c.backward_ms = r.backward_ms;
  c.loss_ms = r.loss_ms;
  c.optimizer_ms = r.optimizer_ms;
  c.images_per_s = r.median_ns > 0 ? static_cast<double>(batch) / (r.median_ns / 1e9) : 0;
  for (double m : r.repeat_median_ns) c.repeat_images_per_s.push_back(m > 0 ? static_cast<double>(batch) / (m / 1e9) : 0);
  c.gflops = r.median_ns > 0 ? c.total_flops / r.median_ns : 0;
  c.overhead_us = r.overhead_per_node_ns / 1e3;
  c.weight_bytes = plan.weight_bytes();
  c.activation_bytes = plan.activation_bytes();
  c.workspace_bytes = plan.workspace_bytes();
  c.fallbacks = plan.fallback_count();
  return c;
}

void fill_speedups(BenchReport& report, double naive_median_ms) {
  for (const auto& c : report.configs)
    if (c.label == "naive") naive_median_ms = c.median_ms;
  if (naive_median_ms <= 0) return;
  for (auto& c : report.configs) c.speedup_vs_naive = c.median_ms > 0 ? naive_median_ms / c.median_ms : 0;
}

void print_report(const BenchReport& rep, std::ostream& os) {
  os << "model " << rep.model << "  batch " << rep.batch << "  mode " << rep.mode << "  threads " << rep.threads
     << "  OpenBLAS " << rep.blas_core << "  oneDNN " << rep.onednn_isa << "\n";
  for (const auto& n : rep.notes) os << "note: " << n << "\n";
  for (const auto& c : rep.configs) {
    os << "\n== " << c.label << (c.label != c.placement ? "  (placement " + c.placement + ")" : "") << " ==\n";
    const bool training = rep.mode == "training";
    // Names are never cut: the node column is as wide as the longest (torchvision's
    // "/layer1/layer1.0/conv1/Conv"-style names differ only at their ends).
    int width = 18;
    for (const auto& n : c.nodes) width = std::max(width, static_cast<int>(n.name.size()));
    char line[1024];
    std::snprintf(line, sizeof line, "%-*s %-18s %-8s %-18s %10s %11s %11s %9s %6s %10s %10s\n", width, "node", "op",
                  "backend", "output", "MFLOP", "median us", training ? "bwd us" : "", "GFLOP/s", "share", "out bytes",
                  "workspace");
    os << line;
    auto fixed = [](double v) { return (std::ostringstream() << std::fixed << std::setprecision(1) << v).str(); };
    for (const auto& n : c.nodes) {
      std::snprintf(line, sizeof line, "%-*.*s %-18.18s %-8s %-18.18s %10.2f %11s %11s %9s %5.1f%% %10s %10s\n",
                    width, 600, n.name.c_str(), n.op.c_str(), n.backend.c_str(), n.output_shape.c_str(), n.flops / 1e6,
                    n.view ? "view" : fixed(n.median_us).c_str(), training && !n.view ? fixed(n.backward_us).c_str() : "",
                    n.view || n.flops == 0 ? "-" : fixed(n.gflops).c_str(), 100 * n.share,
                    format_bytes(static_cast<double>(n.output_bytes)).c_str(),
                    format_bytes(static_cast<double>(n.workspace_bytes)).c_str());
      os << line;
    }
    for (const auto& n : c.nodes)
      if (!n.fallback_reason.empty())
        os << "fallback: " << n.name << " (" << n.op << ") ran on " << n.backend << " instead of " << n.requested
           << ": " << n.fallback_reason << "\n";
    std::snprintf(line, sizeof line,
                  "summary: %.1f images/s  median %.3f ms  min %.3f ms  %.1f GFLOP/s  %.1f GFLOP per batch",
                  c.images_per_s, c.median_ms, c.min_ms, c.gflops, c.total_flops / 1e9);
    os << line;
    if (c.speedup_vs_naive > 0) os << "  speed-up vs naive " << std::fixed << std::setprecision(1) << c.speedup_vs_naive << "x";
    os << std::defaultfloat << "\n";
    if (training) {
      std::snprintf(line, sizeof line, "         step: forward %.3f ms  loss %.3f ms  backward %.3f ms  optimizer %.3f ms\n",
                    c.forward_ms, c.loss_ms, c.backward_ms, c.optimizer_ms);
      os << line;
    }
    std::snprintf(line, sizeof line,
                  "         kernels %.3f ms  overhead %.2f us/node  iterations %d measured (%d warm-up)%s\n",
                  c.kernel_ms, c.overhead_us, c.measured, c.warmup, c.budget_hit ? ", stopped by the time budget" : "");
    os << line;
    os << "memory:  weights " << format_bytes(static_cast<double>(c.weight_bytes)) << "  activations "
       << format_bytes(static_cast<double>(c.activation_bytes)) << "  workspace "
       << format_bytes(static_cast<double>(c.workspace_bytes)) << "  peak tracked "
       << format_bytes(static_cast<double>(c.peak_tracked_bytes)) << "\n";
    if (c.checked) {
      const char* what = rep.mode == "training" ? "loss and gradients" : "outputs";
      if (c.check_ok) os << "check:   " << what << " match naive (max abs err " << c.max_abs_err << ")\n";
      else os << "check:   MISMATCH vs naive: " << c.check_message << "\n";
      if (!c.first_divergent_node.empty()) os << "check:   first divergent node: " << c.first_divergent_node << "\n";
    }
    if (c.fallbacks) os << "fallbacks: " << c.fallbacks << " node(s), listed above\n";
  }
}

Status write_json(const BenchReport& rep, const std::string& path) {
  using nlohmann::json;
  json j;
  j["schema"] = "mosaic.bench/1";
  j["model"] = rep.model;
  j["batch"] = rep.batch;
  j["mode"] = rep.mode;
  j["threads"] = rep.threads;
  j["blas_core"] = rep.blas_core;
  j["onednn_isa"] = rep.onednn_isa;
  j["seed"] = rep.seed;
  j["config"] = {{"warmup", rep.config.warmup},
                 {"iterations", rep.config.iterations},
                 {"repeats", rep.config.repeats},
                 {"max_seconds", rep.config.max_seconds}};
  j["notes"] = rep.notes;
  j["runs"] = json::array();
  for (const auto& c : rep.configs) {
    json r;
    r["label"] = c.label;
    r["placement"] = c.placement;
    r["check"] = {{"performed", c.checked},
                  {"passed", c.check_ok},
                  {"max_abs_error", c.max_abs_err},
                  {"max_rel_error", c.max_rel_err},
                  {"message", c.check_message},
                  {"first_divergent_node", c.first_divergent_node.empty() ? nlohmann::json() : nlohmann::json(c.first_divergent_node)}};
    r["iterations"] = {{"warmup", c.warmup}, {"measured", c.measured}, {"repeats", c.repeats}, {"budget_hit", c.budget_hit}};
    r["summary"] = {{"images_per_s", c.images_per_s},
                    {"repeat_images_per_s", c.repeat_images_per_s},
                    {"median_ms", c.median_ms},
                    {"min_ms", c.min_ms},
                    {"kernel_ms", c.kernel_ms},
                    {"gflops", c.gflops},
                    {"total_flops", c.total_flops},
                    {"speedup_vs_naive", c.speedup_vs_naive},
                    {"overhead_per_node_us", c.overhead_us},
                    {"forward_ms", c.forward_ms},
                    {"loss_ms", c.loss_ms},
                    {"backward_ms", c.backward_ms},
                    {"optimizer_ms", c.optimizer_ms},
                    {"fallbacks", c.fallbacks}};
    r["memory"] = {{"weight_bytes", c.weight_bytes},
                   {"activation_bytes", c.activation_bytes},
                   {"workspace_bytes", c.workspace_bytes},
                   {"peak_tracked_bytes", c.peak_tracked_bytes}};
    r["nodes"] = json::array();
    for (const auto& n : c.nodes)
      r["nodes"].push_back({{"name", n.name},
                            {"op", n.op},
                            {"backend", n.backend},
                            {"requested_backend", n.requested},
                            {"fallback_reason", n.fallback_reason},
                            {"output_shape", n.output_shape},
                            {"view", n.view},
                            {"flops", n.flops},
                            {"median_us", n.median_us},
                            {"min_us", n.min_us},
                            {"backward_median_us", n.backward_us},
                            {"gflops", n.gflops},
                            {"share", n.share},
                            {"output_bytes", n.output_bytes},
                            {"workspace_bytes", n.workspace_bytes}});
    j["runs"].push_back(r);
  }
  std::ofstream f(path);
  if (!f) return Status::io_error(path + ": cannot open for writing");
  f << j.dump(2) << "\n";
  return f ? Status::ok() : Status::io_error(path + ": write failed");
}

Status write_csv(const BenchReport& rep, const std::string& path) {
  std::ofstream f(path);
  if (!f) return Status::io_error(path + ": cannot open for writing");
  f << "config,node,op,backend,output_shape,flops,median_us,min_us,gflops,share,output_bytes,workspace_bytes\n";
  auto q = [](const std::string& s) { return "\"" + s + "\""; };
  for (const auto& c : rep.configs) {
    for (const auto& n : c.nodes)
      f << q(c.label) << ',' << q(n.name) << ',' << n.op << ',' << n.backend << ',' << q(n.output_shape) << ','
        << n.flops << ',' << n.median_us << ',' << n.min_us << ',' << n.gflops << ',' << n.share << ','
        << n.output_bytes << ',' << n.workspace_bytes << '\n';
    f << q(c.label) << ",TOTAL,,," << ',' << c.total_flops << ',' << c.median_ms * 1e3 << ',' << c.min_ms * 1e3 << ','
      << c.gflops << ",1," << c.activation_bytes << ',' << c.workspace_bytes << '\n';
  }
  return f ? Status::ok() : Status::io_error(path + ": write failed");
}

}  // namespace mosaic
