#include "metrics/report.hpp"
#include "ir/file_io.hpp"

#include <algorithm>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace mosaic {

namespace {

/// v with two decimals ("1.23", "12345.60"): a ratio or core count cut to four characters
/// read 12345.6 as "1234".
std::string fixed2(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

/// The peak GFLOP/s and memory GB/s a node's figures are divided by: its device's
/// (BenchReport::device_peaks) for a step on a device, none if that device's are unknown (a GPU
/// step is never divided by the CPU's) or the configuration is bf16 (a device measures float32
/// only), else the machine's: of bfloat16 matmuls in a bf16 configuration, of sgemm otherwise
/// (0: not measured).
std::pair<double, double> node_peaks(const BenchReport& rep, const ConfigReport& c, const NodeRow& n) {
  const bool bf16 = c.precision == "bf16";
  if (n.device.empty()) return {bf16 ? rep.peaks.bf16_gemm_gflops : rep.peaks.sgemm_gflops, rep.peaks.bandwidth_gbs};
  const auto it = rep.device_peaks.find(n.device);
  if (it == rep.device_peaks.end()) return {0.0, 0.0};
  return {bf16 ? 0.0 : it->second.gflops, it->second.bandwidth_gbs};
}

/// A configuration's peak: its device's where it computes on one (the first), else the
/// machine's: of bfloat16 matmuls for a bf16 configuration, of sgemm otherwise (0: unknown;
/// a device measures float32 only, so its bf16 configurations have none).
double config_peak(const BenchReport& rep, const ConfigReport& c) {
  const bool bf16 = c.precision == "bf16";
  if (c.device_bytes.empty()) return bf16 ? rep.peaks.bf16_gemm_gflops : rep.peaks.sgemm_gflops;
  const auto it = rep.device_peaks.find(c.device_bytes.begin()->first);
  return it == rep.device_peaks.end() || bf16 ? 0 : it->second.gflops;
}

/// What config_peak divides by, for the summary line: "sgemm", "bf16 matmul", a device's name.
std::string config_peak_name(const ConfigReport& c) {
  if (!c.device_bytes.empty()) return c.device_bytes.begin()->first;
  return c.precision == "bf16" ? "bf16 matmul" : "sgemm";
}

}  // namespace

std::string format_bytes(double b) {
  char buf[32];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

int64_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // kilobytes on Linux
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
    row.device = st.device ? st.device->name() : "";
    row.requested = st.requested;
    row.fallback_reason = st.fallback_reason;
    row.widened_from = st.widened_from;
    row.view = st.alias;
    row.output_shape = st.out.empty() || st.out[0] < 0 ? "" : shape_str(plan.values()[st.out[0]].desc.shape);
    row.flops = st.flops;
    row.backward_flops_data = st.backward_flops_data;
    row.backward_flops_weights = st.backward_flops_weights;
    row.output_bytes = static_cast<int64_t>(st.out_bytes);
    if (!st.alias) {
      row.bytes_moved = row.output_bytes;
      for (int v : st.in)
        if (v >= 0) row.bytes_moved += static_cast<int64_t>(plan.values()[v].desc.bytes());
    }
    row.workspace_bytes = static_cast<int64_t>(st.kernel->workspace_bytes());
    if (const NodeStats* ns = by_step[s]) {
      row.timing = *ns;
      row.median_us = ns->forward.median / 1e3;
      row.min_us = ns->forward.min / 1e3;
      row.backward_us = ns->backward.median / 1e3;
      row.gflops = row.median_us > 0 ? row.flops / (row.median_us * 1e3) : 0;
      row.backward_gflops =
          row.backward_us > 0 ? (row.backward_flops_data + row.backward_flops_weights) / (row.backward_us * 1e3) : 0;
      row.share = r.kernel_sum_median_ns > 0 ? (ns->forward.median + ns->backward.median) / r.kernel_sum_median_ns : 0;
    }
    c.total_flops += row.flops;
    c.create_ms += static_cast<double>(st.create_ns) / 1e6;
    c.total_backward_flops += row.backward_flops_data + row.backward_flops_weights;
    c.nodes.push_back(row);
  }
  c.warmup = r.warmup_done;
  c.measured = r.measured;
  c.repeats = static_cast<int>(r.repeat_median_ns.size());
  c.budget_hit = r.budget_hit;
  c.timing = r;
  c.timing.nodes.clear();
  c.median_ms = r.iteration.median / 1e6;
  c.min_ms = r.iteration.min / 1e6;
  c.kernel_ms = r.kernel_sum_median_ns / 1e6;
  c.forward_ms = r.forward_ms;
  c.backward_ms = r.backward_ms;
  c.loss_ms = r.loss_ms;
  c.optimizer_ms = r.optimizer_ms;
  c.images_per_s = r.iteration.median > 0 ? static_cast<double>(batch) / (r.iteration.median / 1e9) : 0;
  for (double m : r.repeat_median_ns) c.repeat_images_per_s.push_back(m > 0 ? static_cast<double>(batch) / (m / 1e9) : 0);
  // Training: a step does forward and backward work (the optimizer's few FLOPs per
  // parameter are not counted).
  c.gflops = r.iteration.median > 0 ? (c.total_flops + c.total_backward_flops) / r.iteration.median : 0;
  c.overhead_us = r.overhead_per_node_ns / 1e3;
  c.weight_bytes = plan.weight_bytes();
  c.activation_bytes = plan.activation_bytes();
  c.attention_bytes = plan.attention_bytes();
  c.device_bytes = plan.device_bytes();
  c.workspace_bytes = plan.workspace_bytes();
  c.fallbacks = plan.fallback_count();
  const std::vector<int> final_step = plan.grad_final_step();
  const auto params = plan.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].grad.defined())
      c.gradients.push_back({params[i].name, static_cast<int64_t>(params[i].grad.bytes()), final_step[i]});
  return c;
}

void fill_speedups(BenchReport& report, double naive_median_ms) {
  for (const auto& c : report.configs)
    if (c.label == "naive") naive_median_ms = c.median_ms;
  if (naive_median_ms <= 0) return;
  for (auto& c : report.configs) c.speedup_vs_naive = c.median_ms > 0 ? naive_median_ms / c.median_ms : 0;
}

namespace {

/// The iteration-time statistics, per-repeat throughput, adaptive outcome and node coverage.
void print_statistics(const ConfigReport& c, const BenchConfig& cfg, std::ostream& os) {
  const SampleStats& st = c.timing.iteration;
  char line[512];
  std::string ci = "n/a (fewer than 6 samples)";
  if (st.ci_low && st.ci_high) {
    std::snprintf(line, sizeof line, "[%.3f, %.3f] ms (+-%.1f%%)", *st.ci_low / 1e6, *st.ci_high / 1e6,
                  100 * st.rel_ci_half_width().value_or(0));
    ci = line;
  }
  std::snprintf(line, sizeof line,
                "timing:  median 95%% CI %s  mean %.3f ms  IQR %.3f ms  p90 %.3f ms  p99 %.3f ms  outliers %d/%zu%s\n",
                ci.c_str(), st.mean / 1e6, st.iqr / 1e6, st.p90 / 1e6, st.p99 / 1e6, st.outliers, st.n,
                st.noisy ? "  NOISY (CI beyond +-5% or over 10% outliers)" : "");
  os << line;
  if (c.repeat_images_per_s.size() > 1) {
    os << "repeats:";
    for (double v : c.repeat_images_per_s) os << " " << std::fixed << std::setprecision(1) << v;
    os << std::defaultfloat << " images/s\n";
  }
  if (c.timing.adaptive) {
    std::snprintf(line, sizeof line, "adaptive: target +-%.1f%% %s after %d iterations%s\n", 100 * cfg.target_ci,
                  c.timing.converged ? "reached" : "NOT reached", c.measured,
                  c.timing.converged ? "" : c.budget_hit ? " (time budget ended)" : " (--iterations cap)");
    os << line;
  }
  std::snprintf(line, sizeof line, "coverage: per-node times account for %.1f%% of the iteration%s\n",
                100 * c.timing.node_coverage,
                c.timing.node_coverage < 1 - kNodeCoverageTolerance ? " (less than 95%: time outside the nodes)" : "");
  os << line;
}

}  // namespace

/// "1234.5 images/s", or for token models "12.3 sequences/s (1574 tokens/s)".
static std::string throughput(const BenchReport& rep, double per_s) {
  char b[96];
  if (rep.sequence > 0)
    std::snprintf(b, sizeof b, "%.1f sequences/s (%.0f tokens/s)", per_s, per_s * static_cast<double>(rep.sequence));
  else
    std::snprintf(b, sizeof b, "%.1f images/s", per_s);
  return b;
}

void print_report(const BenchReport& rep, std::ostream& os) {
  print_report_header(rep, os);
  for (const auto& c : rep.configs) print_config(rep, c, os);
  print_report_footer(rep, os);
}

void print_report_header(const BenchReport& rep, std::ostream& os) {
  os << "model " << rep.model << "  batch " << rep.batch << "  mode " << rep.mode << "  threads " << rep.threads
     << "  kernels: " << kernels_line(rep.kernels) << "\n";
  if (!rep.input.empty()) os << "input: " << rep.input << "\n";
  if (rep.peaks.sgemm_gflops > 0) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "peaks: sgemm %.1f GFLOP/s (OpenBLAS %.1f, oneDNN %.1f), memory %.1f GB/s (triad; reading %.1f) "
                  "(%s %s)\n",
                  rep.peaks.sgemm_gflops, rep.peaks.openblas_sgemm_gflops, rep.peaks.onednn_sgemm_gflops,
                  rep.peaks.bandwidth_gbs, rep.peaks.read_bandwidth_gbs, rep.peaks.from_cache ? "cached, measured" : "measured",
                  rep.peaks.measured_utc.c_str());
    os << line;
    if (rep.peaks.bf16_gemm_gflops > 0)
      os << "peaks: bf16 matmul " << std::fixed << std::setprecision(1) << rep.peaks.bf16_gemm_gflops << std::defaultfloat
         << " GFLOP/s (oneDNN, bfloat16 operands into float32; the bf16 configurations' %peak)\n";
    if (rep.peaks.others_cpu > kPeaksContended)
      os << "warning: other processes used " << static_cast<int>(100 * rep.peaks.others_cpu + 0.5)
         << "% of the CPU while the peaks were measured: they are understated and %peak overstated; "
            "measure them again with --refresh-peaks on a quiet machine\n";
    if (rep.peaks.kept_over_contended >= 0)
      os << "note: the refreshed peaks were measured while other processes used "
         << static_cast<int>(100 * rep.peaks.kept_over_contended + 0.5)
         << "% of the CPU; the earlier quiet measurement is kept\n";
  }
  for (const auto& [device, p] : rep.device_peaks) {
    char line[384];
    std::snprintf(line, sizeof line,
                  "peaks on %s: %.1f GFLOP/s float32, memory %.1f GB/s, copies in %.1f GB/s, out %.1f GB/s (measured now: %s)\n",
                  device.c_str(), p.gflops, p.bandwidth_gbs, p.to_device_gbs, p.to_host_gbs, p.how.c_str());
    os << line;
  }
  for (const auto& n : rep.notes) os << "note: " << n << "\n";
}

/// The configuration's header and its table of nodes, then the fallbacks.
void print_node_table(const BenchReport& rep, const ConfigReport& c, std::ostream& os) {
  os << "\n== " << c.label << (c.label != c.placement ? "  (placement " + c.placement + ")" : "") << " ==\n";
  const bool training = rep.mode == "training";
  // Names are never cut: the node column is as wide as the longest (torchvision's
  // "/layer1/layer1.0/conv1/Conv"-style names differ only at their ends).
  int width = 18;
  for (const auto& n : c.nodes) width = std::max(width, static_cast<int>(n.name.size()));
  char line[1024];
  const bool peaks = rep.peaks.sgemm_gflops > 0 || !rep.device_peaks.empty();
  std::snprintf(line, sizeof line, "%-*s %-18s %-8s %-18s %10s %11s %9s %6s %11s %9s %6s %10s %10s\n", width, "node",
                "op", "backend", "output", "MFLOP", "median us", "GFLOP/s", peaks ? "%peak" : "",
                training ? "bwd us" : "", training ? "bwd GF/s" : "", "share", "out bytes", "workspace");
  os << line;
  auto fixed = [](double v) { return (std::ostringstream() << std::fixed << std::setprecision(1) << v).str(); };
  for (const auto& n : c.nodes) {
    const bool bwd = training && !n.view;
    const bool timed = !n.view && n.flops > 0;
    const double peak = node_peaks(rep, c, n).first;  // the machine's, or the device's for a step on one
    std::snprintf(line, sizeof line, "%-*.*s %-18.18s %-8s %-18.18s %10.2f %11s %9s %6s %11s %9s %5.1f%% %10s %10s\n",
                  width, 600, n.name.c_str(), n.op.c_str(), n.backend.c_str(), n.output_shape.c_str(), n.flops / 1e6,
                  n.view ? "view" : fixed(n.median_us).c_str(), timed ? fixed(n.gflops).c_str() : "-",
                  peak > 0 && timed ? fixed(100 * n.gflops / peak).c_str() : "",
                  bwd ? fixed(n.backward_us).c_str() : "",
                  bwd ? (n.backward_gflops > 0 ? fixed(n.backward_gflops).c_str() : "-") : "", 100 * n.share,
                  format_bytes(static_cast<double>(n.output_bytes)).c_str(),
                  format_bytes(static_cast<double>(n.workspace_bytes)).c_str());
    os << line;
  }
  for (const auto& n : c.nodes)
    if (!n.fallback_reason.empty())
      os << "fallback: " << n.name << " (" << n.op << ") ran on " << n.backend << " instead of " << n.requested
         << ": " << n.fallback_reason << "\n";
  // Nodes whose kernels compute in wider types than the node's (core/promote.hpp), per backend
  // and type: their times include the conversions around them.
  std::map<std::pair<std::string, std::string>, int> widened;
  for (const auto& n : c.nodes)
    if (!n.widened_from.empty()) ++widened[{n.backend, n.widened_from}];
  for (const auto& [key, count] : widened)
    os << "widened: " << count << " node" << (count == 1 ? "" : "s") << " on " << key.first << " computed their "
       << key.second << " tensors in a wider type, converted before and after each run (their times include it)\n";
}

/// Weights, gradients, optimizer state, activations, workspace; per device; page-locked bytes.
void print_memory(const BenchReport& rep, const ConfigReport& c, std::ostream& os) {
  const bool training = rep.mode == "training";
  os << "memory:  weights " << format_bytes(static_cast<double>(c.weight_bytes));
  if (training)
    os << "  gradients " << format_bytes(static_cast<double>(c.timing.gradient_bytes)) << "  optimizer state "
       << format_bytes(static_cast<double>(c.timing.optimizer_state_bytes));
  os << "  activations " << format_bytes(static_cast<double>(c.activation_bytes));
  if (c.attention_bytes) os << " (attention scores " << format_bytes(static_cast<double>(c.attention_bytes)) << ")";
  os << "  workspace "
     << format_bytes(static_cast<double>(c.workspace_bytes)) << "  peak tracked "
     << format_bytes(static_cast<double>(c.peak_tracked_bytes)) << "\n";
  for (const auto& [device, bytes] : c.device_bytes)
    os << "         on " << device << ": activations " << format_bytes(static_cast<double>(bytes.activations))
       << "  resident constants " << format_bytes(static_cast<double>(bytes.constants))
       << "  workspace " << format_bytes(static_cast<double>(bytes.workspace))
       << (bytes.parameters ? "  parameters " + format_bytes(static_cast<double>(bytes.parameters)) : std::string())
       << (bytes.optimizer_state ? "  optimizer state " + format_bytes(static_cast<double>(bytes.optimizer_state))
                                 : std::string())
       << (bytes.gradients ? "  gradients " + format_bytes(static_cast<double>(bytes.gradients)) : std::string())
       << "\n";
  if (c.timing.pinned_input_bytes)
    os << "         inputs page-locked for their copies to the device: "
       << format_bytes(static_cast<double>(c.timing.pinned_input_bytes)) << "\n";
  if (c.timing.pinned_parameter_bytes)
    os << "         parameters and gradients page-locked for their copies each step: "
       << format_bytes(static_cast<double>(c.timing.pinned_parameter_bytes)) << "\n";
  for (const auto& [device, state] : c.device_state) {
    os << "device:  " << device << " after the run:";
    for (const auto& [name, value] : state) os << " " << name << " " << value;
    os << "\n";
  }
}

/// The check against the naive oracle (bf16, tf32 and int8 against float32), and the first
/// divergent node.
void print_check(const BenchReport& rep, const ConfigReport& c, std::ostream& os) {
  char line[1024];
  if (c.checked) {
    const char* what = rep.mode == "training" ? "loss and gradients" : "outputs";
    if (c.precision == "bf16" && rep.mode == "training") {  // loss error, and the gradients' relative L2
      std::snprintf(line, sizeof line,
                    "check:   bf16 %s naive's float32 loss and gradients: loss off by %.3g, gradients within %.1f%% "
                    "(largest relative L2; limits 3%% of the loss, 35%%)\n",
                    c.check_ok ? "agrees with" : "DIFFERS from", c.max_abs_err, 100 * c.max_rel_err);
      os << line;
      if (!c.check_ok) os << "check:   " << c.check_message << "\n";
    } else if (c.precision != "f32") {  // the trade-off: error against the float32 oracle beside the speed
      // The limits: api/bench.hpp kBf16Tolerance, kTf32Tolerance and kF16Tolerance.
      // int8 twins are checked against naive on the same QDQ model, and measured against float32.
      const bool int8 = c.precision == "int8";
      const std::string within = std::string("within ") + (c.precision == "tf32" || c.precision == "fp16" ? "1%" : "3%") + " of";
      std::snprintf(line, sizeof line, "check:   %s %s naive's %s %s: max abs err %.3g (%.2f%% of the output's scale)%s",
                    c.precision.c_str(), c.check_ok ? within.c_str() : "DIFFERS from", int8 ? "int8" : "float32", what,
                    c.max_abs_err, 100 * c.max_rel_err, c.top1_agreement >= 0 ? "" : "\n");
      os << line;
      if (c.top1_agreement >= 0) {
        std::snprintf(line, sizeof line, ", top-1 agreement %.2f%% of rows%s", 100 * c.top1_agreement,
                      int8 ? " with float32" : "\n");
        os << line;
        if (int8) {
          std::snprintf(line, sizeof line, ", SQNR %.1f dB\n", c.sqnr_db);
          os << line;
        }
      }
      if (!c.check_ok) os << "check:   " << c.check_message << "\n";
    } else if (c.check_ok) {
      os << "check:   " << what << " match naive (max abs err " << c.max_abs_err << ")\n";
    } else {
      os << "check:   MISMATCH vs naive: " << c.check_message << "\n";
    }
    if (!c.first_divergent_node.empty()) os << "check:   first divergent node: " << c.first_divergent_node << "\n";
  }
}

void print_config(const BenchReport& rep, const ConfigReport& c, std::ostream& os) {
  print_node_table(rep, c, os);
  const bool training = rep.mode == "training";
  char line[1024];
  if (training)
    std::snprintf(line, sizeof line,
                  "summary: %s  median %.3f ms  min %.3f ms  %.1f GFLOP/s  %.2f GFLOP per step "
                  "(forward %.2f + backward %.2f)",
                  throughput(rep, c.images_per_s).c_str(), c.median_ms, c.min_ms, c.gflops, (c.total_flops + c.total_backward_flops) / 1e9,
                  c.total_flops / 1e9, c.total_backward_flops / 1e9);
  else
    std::snprintf(line, sizeof line,
                  "summary: %s  median %.3f ms  min %.3f ms  %.1f GFLOP/s  %.1f GFLOP per batch",
                  throughput(rep, c.images_per_s).c_str(), c.median_ms, c.min_ms, c.gflops, c.total_flops / 1e9);
  os << line;
  if (const double peak = config_peak(rep, c); peak > 0)
    os << "  " << std::fixed << std::setprecision(1) << 100 * c.gflops / peak << "% of " << config_peak_name(c) << " peak";
  if (c.speedup_vs_naive > 0) os << "  speed-up vs naive " << std::fixed << std::setprecision(1) << c.speedup_vs_naive << "x";
  os << std::defaultfloat << "\n";
  if (training) {
    std::snprintf(line, sizeof line, "         step: forward %.3f ms  loss %.3f ms  backward %.3f ms  optimizer %.3f ms\n",
                  c.forward_ms, c.loss_ms, c.backward_ms, c.optimizer_ms);
    os << line;
  }
  print_statistics(c, rep.config, os);
  std::string cpu = "cpu:     " + fixed2(c.timing.cpu_cores) + " cores busy of " +
                    std::to_string(rep.threads) + " threads";
  for (const auto& [stage, cores] : c.timing.stage_cpu_cores) cpu += "  " + stage + " " + fixed2(cores);
  if (c.timing.others_cpu >= 0)
    cpu += "; other processes " + std::to_string(static_cast<int>(100 * c.timing.others_cpu + 0.5)) + "% of the machine" +
           (c.timing.others_cpu > kPeaksContended
                ? std::string("  CONTENDED (times inflated; measure on a quiet machine") +
                      // OpenMP threads that wait for a busy core cost more than they add
                      // (GPT-2 at batch 1: 2116 ms on 2 threads, 151 ms on 1, under load).
                      (rep.threads > 1 ? ", or with --threads 1, which suffers less from a busy core)" : ")")
                : "");
  os << cpu << "\n";
  if (!std::isnan(c.timing.metrics_overhead)) {
    std::snprintf(line, sizeof line,
                  "metrics: cost %+.2f%% of the iteration (median %.4f ms with per-node events and CPU clocks, %.4f ms "
                  "without; %d alternating pairs)\n",
                  100 * c.timing.metrics_overhead, c.timing.metrics_on_ns / 1e6, c.timing.metrics_off_ns / 1e6,
                  rep.config.overhead_pairs);
    os << line;
  }
  std::snprintf(line, sizeof line,
                "         kernels %.3f ms  overhead %.2f us/node  iterations %d measured (%d warm-up)%s\n",
                c.kernel_ms, c.overhead_us, c.measured, c.warmup, c.budget_hit ? ", stopped by the time budget" : "");
  os << line;
  print_memory(rep, c, os);
  std::snprintf(line, sizeof line, "plan:    created in %.1f ms (every kernel built, weights prepacked)\n", c.create_ms);
  os << line;
  print_check(rep, c, os);
  if (c.fallbacks) os << "fallbacks: " << c.fallbacks << " node(s), listed above\n";
}

void print_config_brief(const BenchReport& rep, const ConfigReport& c, std::ostream& os) {
  char line[512];
  std::snprintf(line, sizeof line, "%-10s %s  median %.3f ms  %.1f GFLOP/s%s%s\n", c.label.c_str(),
                throughput(rep, c.images_per_s).c_str(), c.median_ms, c.gflops, c.fallbacks ? "  (fallbacks)" : "",
                !c.checked ? "" : c.check_ok ? "  check ok" : "  check MISMATCH vs naive");
  os << line;
  (void)rep;
}

void print_ranking(const BenchReport& rep, std::ostream& os) {
  if (rep.configs.size() > 1) {
    // The backends from fastest to slowest (median iteration), as a person would sum it up.
    std::vector<const ConfigReport*> order;
    for (const auto& c : rep.configs) order.push_back(&c);
    std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->median_ms < b->median_ms; });
    os << "\nranking (median iteration, fastest first):";
    for (size_t i = 0; i < order.size(); ++i) {
      char item[256];
      std::snprintf(item, sizeof item, "%s%zu. %s %.3f ms%s", i ? ", " : " ", i + 1, order[i]->label.c_str(),
                    order[i]->median_ms,
                    i ? (" (" + fixed2(order[i]->median_ms / order[0]->median_ms) + "x)").c_str() : "");
      os << item;
    }
    os << "\n";
  }
}

void print_report_footer(const BenchReport& rep, std::ostream& os) {
  print_ranking(rep, os);
  if (rep.interrupted)
    os << "interrupted: the run was stopped (SIGINT/SIGTERM); the configurations above finished, the rest did not run\n";
  os << "\nprocess peak RSS " << format_bytes(static_cast<double>(rep.peak_rss_bytes)) << " (getrusage; all of the above)\n";
  for (const auto& l : provenance_lines(rep.provenance)) os << l << "\n";
}

nlohmann::json device_bytes_json(const Plan::DeviceBytes& bytes) {
  return {{"activation_bytes", bytes.activations}, {"constant_bytes", bytes.constants},
          {"workspace_bytes", bytes.workspace},     {"gradient_bytes", bytes.gradients},
          {"parameter_bytes", bytes.parameters},    {"optimizer_state_bytes", bytes.optimizer_state}};
}

nlohmann::json stats_json(const SampleStats& s, double unit) {
  if (s.n == 0) return nullptr;
  auto opt = [&](const std::optional<double>& v) { return v ? nlohmann::json(*v / unit) : nlohmann::json(); };
  const auto half = s.rel_ci_half_width();
  return {{"n", s.n}, {"median", s.median / unit}, {"min", s.min / unit}, {"max", s.max / unit},
          {"mean", s.mean / unit}, {"stddev", s.stddev / unit}, {"q1", s.q1 / unit}, {"q3", s.q3 / unit},
          {"iqr", s.iqr / unit}, {"p90", s.p90 / unit}, {"p99", s.p99 / unit}, {"ci95_low", opt(s.ci_low)},
          {"ci95_high", opt(s.ci_high)}, {"ci_coverage", s.ci_low ? nlohmann::json(s.ci_coverage) : nlohmann::json()},
          {"rel_ci_half_width", half ? nlohmann::json(*half) : nlohmann::json()}, {"outliers", s.outliers},
          {"noisy", s.noisy}};
}

namespace {

nlohmann::json scaled(const std::vector<double>& ns, double unit) {
  nlohmann::json a = nlohmann::json::array();
  for (double v : ns) a.push_back(v / unit);
  return a;
}

}  // namespace

namespace {

/// A figure only training has: null in inference.
nlohmann::json training_only(const BenchReport& rep, double v) {
  return rep.mode == "training" ? nlohmann::json(v) : nlohmann::json();
}

/// The machine's peaks the percentages are of: null when not measured.
nlohmann::json machine_peaks_json(const MachinePeaks& pk) {
  using nlohmann::json;
  return pk.sgemm_gflops > 0 ? json{{"sgemm_gflops", pk.sgemm_gflops},
                               {"openblas_sgemm_gflops", pk.openblas_sgemm_gflops},
                               {"bf16_gemm_gflops", pk.bf16_gemm_gflops > 0 ? json(pk.bf16_gemm_gflops) : json()},
                               {"onednn_sgemm_gflops", pk.onednn_sgemm_gflops}, {"bandwidth_gbs", pk.bandwidth_gbs},
                               {"read_bandwidth_gbs", pk.read_bandwidth_gbs},
                               {"key", pk.key}, {"measured_utc", pk.measured_utc}, {"from_cache", pk.from_cache},
                               {"others_cpu", pk.others_cpu >= 0 ? json(pk.others_cpu) : json()},
                               {"contended", pk.others_cpu >= 0 ? json(pk.others_cpu > kPeaksContended) : json()}}
                             : json();
}

/// A configuration's headline figures: throughput, medians, FLOPs, stage times, CPU use.
nlohmann::json summary_json(const BenchReport& rep, const ConfigReport& c) {
  using nlohmann::json;
  auto train = [&](double v) { return training_only(rep, v); };
  const double peak = config_peak(rep, c);
  const json pct_of_peak = peak > 0 && c.gflops > 0 ? json(100 * c.gflops / peak) : json();
  return {{"images_per_s", c.images_per_s},  // sequences/s for token models
          {"tokens_per_s", rep.sequence > 0 ? json(c.images_per_s * static_cast<double>(rep.sequence)) : json()},
          {"repeat_images_per_s", c.repeat_images_per_s},
          {"median_ms", c.median_ms},
          {"min_ms", c.min_ms},
          {"kernel_ms", c.kernel_ms},
          {"gflops", c.gflops},
          {"total_flops", c.total_flops},
          {"total_backward_flops", train(c.total_backward_flops)},
          {"speedup_vs_naive", c.speedup_vs_naive > 0 ? json(c.speedup_vs_naive) : json()},
          {"overhead_per_node_us", c.overhead_us},
          {"forward_ms", train(c.forward_ms)},
          {"loss_ms", train(c.loss_ms)},
          {"backward_ms", train(c.backward_ms)},
          {"optimizer_ms", train(c.optimizer_ms)},
          {"fallbacks", c.fallbacks},
          {"node_coverage", c.timing.node_coverage},
          {"cpu_cores", c.timing.cpu_cores},
          {"others_cpu", c.timing.others_cpu >= 0 ? json(c.timing.others_cpu) : json()},
          {"contended", c.timing.others_cpu >= 0 ? json(c.timing.others_cpu > kPeaksContended) : json()},
          {"metrics_overhead", std::isnan(c.timing.metrics_overhead) ? json() : json(c.timing.metrics_overhead)},
          {"metrics_on_ms", std::isnan(c.timing.metrics_overhead) ? json() : json(c.timing.metrics_on_ns / 1e6)},
          {"metrics_off_ms", std::isnan(c.timing.metrics_overhead) ? json() : json(c.timing.metrics_off_ns / 1e6)},
          {"cpu_utilization", rep.threads > 0 ? json(c.timing.cpu_cores / rep.threads) : json()},
          {"stage_cpu_cores", c.timing.stage_cpu_cores.empty() ? json() : [&] {
             json st = json::object();
             for (const auto& [stage, cores] : c.timing.stage_cpu_cores) st[stage] = cores;
             return st;
           }()},
          {"pct_of_peak", pct_of_peak}};
}

/// One node's row: its figures, timing statistics and samples, and its share of the machine's
/// (or, for a step on a device, the device's) peak and roofline bound, min(peak, intensity x
/// bandwidth), null for views and nodes without FLOPs.
nlohmann::json node_json(const BenchReport& rep, const ConfigReport& c, const NodeRow& n) {
  using nlohmann::json;
  auto train = [&](double v) { return training_only(rep, v); };
  const auto [peak, bandwidth] = node_peaks(rep, c, n);
  const json pct_of_peak = peak > 0 && !n.view && n.flops > 0 && n.gflops > 0 ? json(100 * n.gflops / peak) : json();
  const json bound = peak <= 0 || n.view || n.bytes_moved == 0 || n.flops == 0
                         ? json()
                         : json(std::min(peak, n.flops / static_cast<double>(n.bytes_moved) * bandwidth));
  return {{"name", n.name},
          {"op", n.op},
          {"backend", n.backend},
          {"requested_backend", n.requested},
          {"fallback_reason", n.fallback_reason},
          {"widened_from", n.widened_from},
          {"output_shape", n.output_shape},
          {"view", n.view},
          {"flops", n.flops},
          {"median_us", n.view ? json() : json(n.median_us)},
          {"min_us", n.view ? json() : json(n.min_us)},
          {"backward_median_us", n.view ? json() : train(n.backward_us)},
          {"backward_flops_data", train(n.backward_flops_data)},
          {"backward_flops_weights", train(n.backward_flops_weights)},
          {"backward_gflops", n.view || n.backward_gflops == 0 ? json() : train(n.backward_gflops)},
          {"forward_us", stats_json(n.timing.forward, 1e3)},
          {"backward_us", stats_json(n.timing.backward, 1e3)},
          {"samples_us", scaled(n.timing.forward_ns, 1e3)},
          {"backward_samples_us", scaled(n.timing.backward_ns, 1e3)},
          {"gflops", n.view || n.flops == 0 ? json() : json(n.gflops)},
          {"share", n.share},
          {"output_bytes", n.output_bytes},
          {"bytes_moved", n.view ? json() : json(n.bytes_moved)},
          {"arithmetic_intensity", n.view || n.bytes_moved == 0 ? json() : json(n.flops / n.bytes_moved)},
          {"pct_of_peak", pct_of_peak},
          {"roofline_gflops", bound},
          {"pct_of_roofline", bound.is_null() ? json() : json(100 * n.gflops / bound.get<double>())},
          {"workspace_bytes", n.workspace_bytes}};
}

}  // namespace

nlohmann::json bench_json(const BenchReport& rep) {
  using nlohmann::json;
  json j;
  j["schema"] = "mosaic.bench/2";
  j["model"] = rep.model;
  j["batch"] = rep.batch;
  j["mode"] = rep.mode;
  j["threads"] = rep.threads;
  j["kernels"] = kernels_json(rep.kernels);
  j["seed"] = rep.seed;
  j["input"] = rep.input;
  j["config"] = {{"warmup", rep.config.warmup},
                 {"iterations", rep.config.iterations},
                 {"repeats", rep.config.repeats},
                 {"max_seconds", rep.config.max_seconds},
                 {"min_seconds", rep.config.min_seconds},
                 {"target_ci", rep.config.target_ci > 0 ? json(rep.config.target_ci) : json()}};
  j["notes"] = rep.notes;
  if (!rep.auto_placement.is_null()) j["auto_placement"] = rep.auto_placement;
  j["provenance"] = provenance_json(rep.provenance);
  j["peak_rss_bytes"] = rep.peak_rss_bytes;
  if (rep.interrupted) j["interrupted"] = true;
  j["runs"] = json::array();
  j["peaks"] = machine_peaks_json(rep.peaks);
  j["device_peaks"] = json::object();
  for (const auto& [device, p] : rep.device_peaks)
    j["device_peaks"][device] = {{"gflops", p.gflops}, {"bandwidth_gbs", p.bandwidth_gbs},
                                 {"to_device_gbs", p.to_device_gbs}, {"to_host_gbs", p.to_host_gbs}, {"how", p.how}};
  // Figures that only exist in training are null in inference.
  auto train_bytes = [&](int64_t v) { return rep.mode == "training" ? json(v) : json(); };
  for (const auto& c : rep.configs) {
    json r;
    r["label"] = c.label;
    r["placement"] = c.placement;
    r["precision"] = c.precision;
    r["check"] = {{"performed", c.checked},
                  {"passed", c.check_ok},
                  {"max_abs_error", c.max_abs_err},
                  {"max_rel_error", c.max_rel_err},
                  {"message", c.check_message},
                  {"top1_agreement", c.top1_agreement >= 0 ? json(c.top1_agreement) : json()},
                  {"sqnr_db", std::isfinite(c.sqnr_db) ? json(c.sqnr_db) : std::isinf(c.sqnr_db) ? json("inf") : json()},
                  {"first_divergent_node", c.first_divergent_node.empty() ? nlohmann::json() : nlohmann::json(c.first_divergent_node)}};
    r["iterations"] = {{"warmup", c.warmup}, {"measured", c.measured}, {"repeats", c.repeats}, {"budget_hit", c.budget_hit},
                       {"adaptive", c.timing.adaptive}, {"converged", c.timing.adaptive ? json(c.timing.converged) : json()}};
    r["iteration_ms"] = stats_json(c.timing.iteration, 1e6);
    r["samples"] = {{"iteration_ms", scaled(c.timing.iteration_ns, 1e6)}, {"repeat", c.timing.repeat_of}};
    r["summary"] = summary_json(rep, c);
    r["create_ms"] = c.create_ms;
    r["memory"] = {{"weight_bytes", c.weight_bytes},
                   {"gradient_bytes", train_bytes(c.timing.gradient_bytes)},
                   {"optimizer_state_bytes", train_bytes(c.timing.optimizer_state_bytes)},
                   {"activation_bytes", c.activation_bytes},
                   {"attention_bytes", c.attention_bytes},
                   {"workspace_bytes", c.workspace_bytes},
                   {"peak_tracked_bytes", c.peak_tracked_bytes}};
    for (const auto& [device, bytes] : c.device_bytes) r["memory"]["devices"][device] = device_bytes_json(bytes);
    r["memory"]["pinned_input_bytes"] = c.timing.pinned_input_bytes;
    r["memory"]["pinned_parameter_bytes"] = c.timing.pinned_parameter_bytes;
    r["device_state"] = json::object();
    for (const auto& [device, state] : c.device_state)
      for (const auto& [name, value] : state) r["device_state"][device][name] = value;
    if (rep.mode == "training") {
      r["gradients"] = json::array();
      for (const auto& gr : c.gradients)
        r["gradients"].push_back({{"name", gr.name},
                                  {"bytes", gr.bytes},
                                  {"final_node", gr.final_step >= 0 ? json(c.nodes[gr.final_step].name) : json()},
                                  {"final_step", gr.final_step}});
    } else {
      r["gradients"] = json();
    }
    r["nodes"] = json::array();
    for (const auto& n : c.nodes) r["nodes"].push_back(node_json(rep, c, n));
    j["runs"].push_back(r);
  }
  if (!rep.distributed.is_null()) j["distributed"] = rep.distributed;
  return j;
}

Status write_json(const BenchReport& rep, const std::string& path) {
  return write_file_atomic(path, bench_json(rep).dump(2) + "\n");
}

Status write_csv(const BenchReport& rep, const std::string& path) {
  return write_file_atomic(path, [&](std::ostream& f) {
  // Provenance first, as '#' comment lines (pandas: read_csv(..., comment='#')).
  for (const auto& l : provenance_lines(rep.provenance)) f << "# " << l << "\n";
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
  });
}

}  // namespace mosaic
