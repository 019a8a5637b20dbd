#include "api/plan.hpp"

#include "api/util.hpp"
#include "backends/registry.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"

namespace mosaic::api {

namespace {

std::string layout_name(const TensorDesc& d) { return d.layout ? d.layout->backend() + ":" + d.layout->name() : "plain"; }
std::string device_name(const PlanValue& v) { return v.device ? v.device->name() : "host"; }

}  // namespace

Expected<PlanReport> plan(const PlanQuery& q) {
  const auto& reg = builtin_registry();
  if (q.mode != "inference" && q.mode != "training")
    return Status::invalid("`mode` must be inference or training, not '" + q.mode + "'");
  std::vector<std::string> fallback;
  for (const auto& b : q.fallback) {
    if (b == "none") continue;
    if (!reg.has_backend(b)) return Status::invalid("unknown fallback backend '" + b + "' (known: " + join(reg.backends()) + ")");
    fallback.push_back(b);
  }
  Placement placement;
  if (!q.assign.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(placement, assign_placement(q.assign, fallback));
  } else {
    if (!reg.has_backend(q.backend)) return unknown_backend(q.backend);
    placement = Placement::all_on(q.backend, fallback);
  }
  PrepareReport pr;
  auto g = load_prepared(q.model, q.common, &pr);
  if (!g.ok()) return g.status();
  MOSAIC_RETURN_IF_ERROR(placement.check_names(g.value()));
  const bool training = q.mode == "training";
  PlanReport r;
  r.model = q.model;
  r.mode = q.mode;
  r.placement = placement.str();
  r.fallback = placement.fallback;
  r.notes = pr.notes;
  // Training plans fold only the padding and run a Relu before a MaxPool after it, as train does.
  if (q.fuse) {
    FuseReport fr = fuse_graph(g.value(), fuse_options_for(placement, reg, training));
    r.fused = std::move(fr.fused);
    r.reordered = std::move(fr.reordered);
  }
  PlanOptions po;
  po.training = training;
  po.allocate = false;
  auto built = Plan::build(g.value(), placement, reg, po);
  if (!built.ok()) return explain_unsupported(built.status(), g.value());
  const Plan& p = *built.value();
  r.batch = g->inputs.empty() ? 1 : g->value_descs.at(g->inputs[0].name).shape.at(0);
  for (const auto& s : p.steps()) {
    const Node& n = p.node(s);
    // The first output the node has (-1: omitted, as an LSTM's Y where only Y_h is used).
    int first = s.out.front();
    for (int v : s.out)
      if (v >= 0) {
        first = v;
        break;
      }
    const TensorDesc& out = p.values()[first].desc;
    PlanStepReport st;
    st.node = n.name;
    st.op = n.op_type;
    st.requested = s.requested;
    st.backend = s.backend;
    st.output_shape = out.shape;
    st.output_layout = layout_name(out);
    st.output_device = device_name(p.values()[first]);
    st.fallback_reason = s.fell_back() ? s.fallback_reason : "";
    st.widened_from = s.widened_from;
    st.conversion = s.conversion;
    if (s.conversion) {
      const TensorDesc& from = p.values()[s.in[0]].desc;
      st.converted_value = p.values()[s.in[0]].name;
      st.from_layout = layout_name(from);
      st.from_device = device_name(p.values()[s.in[0]]);
      st.bytes_read = from.bytes();
      st.bytes_written = out.bytes();
      r.conversion_bytes += st.bytes_read + st.bytes_written;
    } else {
      r.nodes_per_backend[s.backend]++;
    }
    r.steps.push_back(std::move(st));
  }
  r.conversions = static_cast<int>(p.conversion_count());
  r.fallbacks = static_cast<int>(p.fallback_count());
  return r;
}

nlohmann::json plan_json(const PlanReport& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) {
    nlohmann::json j = {{"node", s.node},        {"op", s.op},  {"requested", s.requested},
                        {"backend", s.backend},  {"output_layout", s.output_layout},
                        {"output_device", s.output_device},
                        {"fallback_reason", s.fallback_reason},  {"conversion", s.conversion},
                        {"widened_from", s.widened_from}};
    if (s.conversion) {
      j["from_layout"] = s.from_layout;
      j["from_device"] = s.from_device;
      j["bytes"] = s.bytes_read + s.bytes_written;
    }
    steps.push_back(std::move(j));
  }
  return {{"schema", "mosaic.plan/1"}, {"model", r.model},  {"batch", r.batch},
          {"mode", r.mode},            {"placement", r.placement}, {"steps", steps},
          {"conversions", r.conversions}, {"conversion_bytes", r.conversion_bytes},
          {"fallbacks", r.fallbacks}, {"fused", r.fused}, {"reordered", r.reordered}};
}

}  // namespace mosaic::api
