// `mosaic plan`: api::plan (api/plan.hpp), printed: each step's node, op, the backend it asked
// for and the one it runs on, its output and layout; then the conversions and fallbacks with
// their reasons, a summary, and --json.
#include <iostream>
#include <map>

#include "api/plan.hpp"
#include "ir/file_io.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "metrics/report.hpp"

namespace mosaic::cli {

int run_plan(const PlanCliOptions& o) {
  if (Status st = check_output_paths({{"--json", o.json}}); !st.is_ok()) return fail(st);
  auto report = api::plan(o);
  if (!report.ok()) return fail(report.status());
  const api::PlanReport& r = report.value();
  std::cout << "plan " << r.model << "  batch " << r.batch << "  " << r.mode << "  placement " << r.placement
            << "  fallback " << (r.fallback.empty() ? "none" : join(r.fallback, ",")) << "\n";
  for (const auto& n : r.notes) std::cout << "note: " << n << "\n";
  if (!r.fused.empty()) std::cout << "note: fused " << join(r.fused) << " (--no-fuse to disable)\n";
  if (!r.reordered.empty())
    std::cout << "note: reordered " << join(r.reordered) << " (exact in training; --no-fuse to disable)\n";
  int width = 20;
  for (const auto& s : r.steps) width = std::max(width, static_cast<int>(s.node.size()));
  char line[1024];
  std::snprintf(line, sizeof line, "%-*s %-18s %-10s %-10s %-20s %s\n", width, "node", "op", "asked", "runs on", "output",
                "output layout");
  std::cout << line;
  for (const auto& s : r.steps) {
    std::snprintf(line, sizeof line, "%-*.*s %-18.18s %-10s %-10s %-20.20s %s%s\n", width, 600, s.node.c_str(),
                  s.op.c_str(), s.requested.c_str(), s.backend.c_str(), shape_str(s.output_shape).c_str(),
                  (s.output_layout + (s.output_device == "host" ? "" : " on " + s.output_device)).c_str(),
                  (std::string(s.fell_back() ? "  (fallback)" : "") +
                   (s.widened_from.empty() ? "" : "  (" + s.widened_from + " widened)"))
                      .c_str());
    std::cout << line;
  }
  for (const auto& s : r.steps) {
    if (s.conversion)
      std::cout << "conversion: '" << s.converted_value << "' "
                << (s.from_device != s.output_device ? s.from_device + " -> " + s.output_device : s.from_layout + " -> plain")
                << ", "
                << format_bytes(static_cast<double>(s.bytes_read)) << " read, "
                << format_bytes(static_cast<double>(s.bytes_written)) << " written\n";
    if (s.fell_back())
      std::cout << "fallback: '" << s.node << "' (" << s.op << ") runs on " << s.backend << " instead of " << s.requested
                << ": " << s.fallback_reason << "\n";
  }
  std::string counts;
  for (const auto& [b, k] : r.nodes_per_backend) counts += (counts.empty() ? "" : ", ") + b + " " + std::to_string(k);
  std::cout << "summary: " << r.steps.size() - static_cast<size_t>(r.conversions) << " nodes (" << counts
            << "), conversions " << r.conversions << " (" << format_bytes(static_cast<double>(r.conversion_bytes))
            << " moved per " << (r.mode == "training" ? "forward" : "run") << "), fallbacks " << r.fallbacks << "\n";
  if (!o.json.empty())
    if (Status st = write_file_atomic(o.json, api::plan_json(r).dump(2) + "\n"); !st.is_ok()) return fail(st);
  return 0;
}

}  // namespace mosaic::cli
