// `mosaic plan`: the placement a plan would run with, before anything is timed: which
// backend runs each node (and which it asked for), every fallback with its reason, every
// layout a backend keeps between nodes, and every conversion the planner inserted (with
// the bytes it moves). Nothing is allocated, so any --batch works.
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "backends/registry.hpp"
#include "core/file_io.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "frontends/cli/cli_util.hpp"
#include "frontends/cli/commands.hpp"
#include "api/models.hpp"
#include "metrics/report.hpp"

namespace mosaic::cli {

namespace {

std::string layout_name(const TensorDesc& d) { return d.layout ? d.layout->backend() + ":" + d.layout->name() : "plain"; }

}  // namespace

int run_plan(const PlanCliOptions& o) {
  const auto& reg = builtin_registry();
  if (o.mode != "inference" && o.mode != "training")
    return fail(Status::invalid("--mode must be inference or training, not '" + o.mode + "'"));
  if (Status st = check_output_paths({{"--json", o.json}}); !st.is_ok()) return fail(st);
  std::vector<std::string> fallback;
  for (const auto& b : o.fallback) {
    if (b == "none") continue;
    if (!reg.has_backend(b)) return fail(Status::invalid("unknown fallback backend '" + b + "' (known: " + join(reg.backends()) + ")"));
    fallback.push_back(b);
  }
  Placement placement;
  if (!o.assign.empty()) {
    auto p = assign_placement(o.assign, fallback);
    if (!p.ok()) return fail(p.status());
    placement = p.value();
  } else {
    if (!reg.has_backend(o.backend))
      return fail(unknown_backend(o.backend));
    placement = Placement::all_on(o.backend, fallback);
  }
  PrepareReport pr;
  auto g = load_prepared(o.model, o.common, &pr);
  if (!g.ok()) return fail(g.status());
  if (Status st = placement.check_names(g.value()); !st.is_ok()) return fail(st);
  const bool training = o.mode == "training";
  // Training plans fold only the padding, as bench and train do.
  const FuseOptions fo = fuse_options_for(placement, reg, training);
  const FuseReport fused = o.fuse ? fuse_graph(g.value(), fo) : FuseReport{};
  PlanOptions po;
  po.training = training;
  po.allocate = false;
  auto plan = Plan::build(g.value(), placement, reg, po);
  if (!plan.ok()) return fail(explain_unsupported(plan.status(), g.value()));
  const Plan& p = *plan.value();

  const int64_t batch = g->inputs.empty() ? 1 : g->value_descs.at(g->inputs[0].name).shape.at(0);
  std::cout << "plan " << o.model << "  batch " << batch << "  " << o.mode << "  placement " << placement.str()
            << "  fallback " << (placement.fallback.empty() ? "none" : join(placement.fallback, ",")) << "\n";
  for (const auto& n : pr.notes) std::cout << "note: " << n << "\n";
  if (!fused.fused.empty()) std::cout << "note: fused " << join(fused.fused) << " (--no-fuse to disable)\n";
  int width = 20;
  for (const auto& s : p.steps()) width = std::max(width, static_cast<int>(p.node(s).name.size()));
  char line[1024];
  std::snprintf(line, sizeof line, "%-*s %-18s %-10s %-10s %-20s %s\n", width, "node", "op", "asked", "runs on", "output",
                "output layout");
  std::cout << line;
  nlohmann::json steps = nlohmann::json::array();
  std::map<std::string, int> per_backend;
  size_t conversion_bytes = 0;
  for (const auto& s : p.steps()) {
    const Node& n = p.node(s);
    const TensorDesc& out = p.values()[s.out[0]].desc;
    std::snprintf(line, sizeof line, "%-*.*s %-18.18s %-10s %-10s %-20.20s %s%s\n", width, 600, n.name.c_str(),
                  n.op_type.c_str(), s.requested.c_str(), s.backend.c_str(), shape_str(out.shape).c_str(),
                  layout_name(out).c_str(), s.fell_back() ? "  (fallback)" : "");
    std::cout << line;
    nlohmann::json j = {{"node", n.name},        {"op", n.op_type},  {"requested", s.requested},
                        {"backend", s.backend},  {"output_layout", layout_name(out)},
                        {"fallback_reason", s.fallback_reason},  {"conversion", s.conversion}};
    if (s.conversion) {
      const TensorDesc& from = p.values()[s.in[0]].desc;
      j["from_layout"] = layout_name(from);
      j["bytes"] = from.bytes() + out.bytes();
      conversion_bytes += from.bytes() + out.bytes();
    } else {
      per_backend[s.backend]++;
    }
    steps.push_back(std::move(j));
  }
  for (const auto& s : p.steps()) {
    if (s.conversion) {
      const TensorDesc& from = p.values()[s.in[0]].desc;
      std::cout << "conversion: '" << p.values()[s.in[0]].name << "' " << layout_name(from) << " -> plain, "
                << format_bytes(static_cast<double>(from.bytes())) << " read, "
                << format_bytes(static_cast<double>(p.values()[s.out[0]].desc.bytes())) << " written\n";
    }
    if (s.fell_back())
      std::cout << "fallback: '" << p.node(s).name << "' (" << p.node(s).op_type << ") runs on " << s.backend
                << " instead of " << s.requested << ": " << s.fallback_reason << "\n";
  }
  std::string counts;
  for (const auto& [b, k] : per_backend) counts += (counts.empty() ? "" : ", ") + b + " " + std::to_string(k);
  std::cout << "summary: " << p.steps().size() - p.conversion_count() << " nodes (" << counts << "), conversions "
            << p.conversion_count() << " (" << format_bytes(static_cast<double>(conversion_bytes)) << " moved per "
            << (training ? "forward" : "run") << "), fallbacks " << p.fallback_count() << "\n";
  if (!o.json.empty()) {
    nlohmann::json doc = {{"schema", "mosaic.plan/1"}, {"model", o.model},  {"batch", batch},
                          {"mode", o.mode},            {"placement", placement.str()}, {"steps", steps},
                          {"conversions", p.conversion_count()}, {"conversion_bytes", conversion_bytes},
                          {"fallbacks", p.fallback_count()}, {"fused", fused.fused}};
    if (Status st = write_file_atomic(o.json, doc.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  return 0;
}

}  // namespace mosaic::cli
