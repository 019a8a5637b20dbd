#include "core/prepare.hpp"

#include "core/control_flow.hpp"

#include "core/inputs.hpp"
#include "core/run_time_shape.hpp"

#include "core/events.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>

#include "ir/checked.hpp"
#include "operators/schema.hpp"

namespace mosaic {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::kCreate: return "create";
    case Stage::kForward: return "forward";
    case Stage::kBackward: return "backward";
    case Stage::kConversion: return "conversion";
  }
  return "?";
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

Status bind_inputs(Graph& g, const PrepareOptions& opt, PrepareReport& report) {
  std::set<std::string> used, symbolic_names;
  for (auto& in : g.inputs) {
    if (!in.has_shape) return Status::invalid(g.source + ": input '" + in.name + "' has no shape information");
    Shape s = in.dims;
    // --batch binds the batch axis: dimension 1 of a time-major recurrent input ([seq, batch,
    // ...]), whose dimension 0 is the sequence, else dimension 0.
    const size_t b = s.size() > 1 ? batch_axis(g, in.name) : 0;
    for (size_t d = 0; d < s.size(); ++d) {
      const bool symbolic = s[d] < 0;
      const std::string param = d < in.dim_params.size() ? in.dim_params[d] : "";
      if (symbolic && !param.empty()) symbolic_names.insert(param);
      if (symbolic && !param.empty() && opt.dims.count(param) && !(d == b && opt.batch > 0)) {
        s[d] = opt.dims.at(param);
        used.insert(param);
      } else if (d == b && opt.batch > 0) {
        if (!symbolic && s[d] != opt.batch)
          report.notes.push_back("input '" + in.name + "': fixed batch " + std::to_string(s[d]) + " overridden to " +
                                 std::to_string(opt.batch) + (b ? " (dimension 1: the batch of a time-major sequence)" : ""));
        s[d] = opt.batch;
      } else if (symbolic) {
        if (d != b)
          return Status::invalid(g.source + ": input '" + in.name + "' dimension " + std::to_string(d) +
                                 " is symbolic ('" + (param.empty() ? "?" : param) + "'); bind it with --shape " +
                                 (param.empty() ? "NAME" : param) + "=N");
        s[d] = 1;  // an unbound batch is 1
      }
    }
    MOSAIC_RETURN_IF_ERROR(check_shape(s, in.dtype, g.source + ": input '" + in.name + "'"));
    g.value_descs[in.name] = {in.dtype, s};
  }
  for (const auto& [name, value] : opt.dims) {
    if (used.count(name) || (symbolic_names.count(name) && opt.batch > 0)) continue;
    std::string known;
    for (const auto& n : symbolic_names) known += (known.empty() ? "" : ", ") + n;
    return Status::invalid(g.source + ": --shape " + name + "=" + std::to_string(value) +
                           ": no input has a symbolic dimension named '" + name + "' (symbolic: " +
                           (known.empty() ? "none" : known) + ")");
  }
  return Status::ok();
}

/// The descriptor of every value of `g` (being prepared: its inputs bound, its constant
/// inputs and the nodes folded so far already initializers) folded on the values
/// opt.specialise gives for its inputs: where the shapes that depend on input values come from.
Expected<std::map<std::string, TensorDesc>> specialised_descs(const Graph& g, const KernelRegistry& registry,
                                                              const PrepareOptions& opt) {
  const std::string what = g.source + ": planning the shapes that depend on input values from the inputs given";
  auto values = opt.specialise(g);
  if (!values.ok()) return values.status().with_context(what);
  if (values.value().size() != g.inputs.size())
    return Status::internal(what + ": " + std::to_string(values.value().size()) + " values for " +
                            std::to_string(g.inputs.size()) + " inputs");
  Graph probe = g;
  // Mid-pass, the nodes folded so far are initializers already: drop them, so that each value
  // keeps its one definition.
  probe.nodes.erase(std::remove_if(probe.nodes.begin(), probe.nodes.end(),
                                   [&](const Node& n) {
                                     return std::all_of(n.outputs.begin(), n.outputs.end(), [&](const std::string& o) {
                                       return o.empty() || g.initializers.count(o);
                                     });
                                   }),
                    probe.nodes.end());
  PrepareOptions po = opt;
  po.specialise = nullptr;
  po.fold_parameters = true;
  po.constant_inputs.clear();
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const std::string& name = g.inputs[i].name;
    const Tensor& v = values.value()[i];
    if (v.desc() != g.value_descs.at(name))
      return Status::invalid(what + ": input '" + name + "' is " + v.desc().str() + ", the graph binds " +
                             g.value_descs.at(name).str());
    po.constant_inputs[name] = v;
  }
  auto report = prepare_graph(probe, registry, po);
  if (!report.ok()) return report.status().with_context(what);
  return std::move(probe.value_descs);
}

/// ONNX's single assignment: every value has one definition, a graph input, an initializer
/// (which may share an input's name: its default) or one output of one node. A model that
/// writes a value twice has no meaning (which write would a reader see?), so it is refused
/// naming both writers.
Status check_single_definitions(const Graph& g) {
  std::map<std::string, std::string> defined;  // value -> what defines it
  for (const auto& in : g.inputs) defined.emplace(in.name, "a graph input");
  for (const auto& [name, t] : g.initializers) defined.emplace(name, "an initializer");
  for (const Node& node : g.nodes)
    for (const auto& o : node.outputs) {
      if (o.empty()) continue;
      auto [it, fresh] = defined.emplace(o, node.label());
      if (!fresh)
        return Status::invalid(g.source + ": value '" + o + "' is defined twice, by " + it->second + " and by " +
                               node.label() + " (each ONNX value has one definition)");
    }
  return Status::ok();
}

/// The context that infers `node`: its inputs' descriptors (each defined by an earlier node,
/// an input or an initializer) and the constants among them; whether all of them are
/// constants, and whether one is a parameter or derived from one.
Status node_context(const Graph& g, const Node& node, const std::set<std::string>& parameter_derived, KernelContext* ctx,
                    bool* all_const, bool* reads_parameter) {
  ctx->node = &node;
  ctx->opset = g.opset;
  for (const auto& in : node.inputs) {
    if (in.empty()) {
      ctx->inputs.push_back({});
      ctx->input_present.push_back(false);
      ctx->constants.push_back(nullptr);
      continue;
    }
    auto it = g.value_descs.find(in);
    if (it == g.value_descs.end())
      return Status::invalid(g.source + ": " + node.label() + " uses value '" + in +
                             "' that no earlier node, input or initializer defines");
    ctx->inputs.push_back(it->second);
    ctx->input_present.push_back(true);
    auto c = g.initializers.find(in);
    ctx->constants.push_back(c == g.initializers.end() ? nullptr : &c->second);
    *all_const = *all_const && c != g.initializers.end();
    *reads_parameter = *reads_parameter || parameter_derived.count(in);
  }
  return Status::ok();
}

/// A node whose output shapes depend on input values: its outputs' descriptors from the
/// graph folded on the inputs given (`specialised`), noted in the report.
Expected<std::vector<TensorDesc>> planned_from_values(const Graph& g, const Node& node,
                                                      const std::map<std::string, TensorDesc>& specialised,
                                                      PrepareReport* report) {
  std::vector<TensorDesc> descs;
  std::string shapes;
  for (const auto& o : node.outputs) {
    if (o.empty()) {
      descs.emplace_back();
      continue;
    }
    auto it = specialised.find(o);
    if (it == specialised.end())
      return Status::internal(g.source + ": " + node.label() + ": the fold on the inputs given left '" + o + "' unknown");
    descs.push_back(it->second);
    shapes += (shapes.empty() ? "" : ", ") + it->second.str();
  }
  report->run_time_shapes.push_back(node.label());
  report->notes.push_back(node.label() + ": output shapes depend on input values; planned from the inputs given (" +
                          shapes + ") and checked each run");
  return descs;
}

/// After `node` folded: a DequantizeLinear of integer constants per tensor or per axis (not
/// blocked) is remembered with its codes, scale and zero point (Graph::dequantized).
void remember_dequantized(Graph& g, const Node& node) {
  if (node.op_key() != "DequantizeLinear" || node.attr_int("block_size", 0) != 0 || node.outputs.empty()) return;
  auto input = [&](size_t i) -> const Tensor* {
    if (i >= node.inputs.size() || node.inputs[i].empty()) return nullptr;
    auto it = g.initializers.find(node.inputs[i]);
    return it == g.initializers.end() ? nullptr : &it->second;
  };
  const Tensor *codes = input(0), *scale = input(1), *zero = input(2);
  if (!codes || !scale || !dtype_is_integer(codes->dtype()) || scale->dtype() != DType::kF32) return;
  Dequantized d{*codes, *scale, zero ? *zero : Tensor{}, node.attr_int("axis", 1)};
  if (d.axis < 0) d.axis += static_cast<int64_t>(codes->rank());
  if (scale->numel() != 1 && (d.axis < 0 || d.axis >= static_cast<int64_t>(codes->rank()) ||
                              scale->numel() != codes->dim(static_cast<size_t>(d.axis))))
    return;
  g.dequantized[node.outputs[0]] = std::move(d);
}

/// A node whose inputs are all constants, computed once on opt.fold_backend: one tensor per
/// output (undefined where the output is omitted).
Expected<std::vector<Tensor>> fold_node(const Graph& g, const Node& node, const KernelContext& ctx,
                                        const KernelRegistry& registry, const PrepareOptions& opt) {
  auto kernel = registry.create(opt.fold_backend, ctx);
  if (!kernel.ok()) return kernel.status().with_context(g.source + ": constant folding");
  std::vector<const Tensor*> src;
  for (size_t i = 0; i < node.inputs.size(); ++i) src.push_back(ctx.constants[i]);
  std::vector<Tensor> results;
  std::vector<Tensor*> dst;
  for (size_t i = 0; i < node.outputs.size(); ++i) results.push_back(Tensor::empty(ctx.outputs[i]));
  for (auto& r : results) dst.push_back(&r);
  if (kernel.value()->aliases_input()) {
    results[0] = ctx.constants[0]->clone().reshaped(ctx.outputs[0].shape);
    return results;
  }
  for (size_t i = 0; i < node.outputs.size(); ++i)
    if (!node.has_output(i)) dst[i] = nullptr;
  Status st = kernel.value()->forward(src, dst);
  if (!st.is_ok()) return st.with_context(g.source + ": constant folding");
  return results;
}

}  // namespace

Expected<PrepareReport> prepare_graph(Graph& g, const KernelRegistry& registry, const PrepareOptions& opt) {
  PrepareReport report;
  const SubgraphScope subgraphs(registry, opt);  // If, Loop and Scan infer through their subgraphs
  std::optional<std::map<std::string, TensorDesc>> specialised;  // folded on the inputs given, when first needed
  g.value_descs.clear();
  for (const auto& [name, value] : opt.constant_inputs) {
    auto it = std::find_if(g.inputs.begin(), g.inputs.end(), [&](const ValueInfo& v) { return v.name == name; });
    if (it == g.inputs.end()) return Status::invalid(g.source + ": no graph input named '" + name + "' to bind");
    g.inputs.erase(it);
    g.initializers[name] = value;
    g.constants.insert(name);
  }
  MOSAIC_RETURN_IF_ERROR(check_single_definitions(g));
  MOSAIC_RETURN_IF_ERROR(bind_inputs(g, opt, report));
  for (const auto& [name, t] : g.initializers) g.value_descs[name] = t.desc();

  // Values that are, or are computed from, the model's float initializers (its parameters).
  // What folds from anything else is a constant, never a parameter; without
  // fold_parameters, nodes that read parameters stay nodes.
  std::set<std::string> parameter_derived;
  for (const auto& [name, t] : g.initializers)
    if (t.dtype() == DType::kF32 && !opt.constant_inputs.count(name) && !g.constants.count(name))
      parameter_derived.insert(name);
  std::vector<Node> kept;
  for (const Node& node : g.nodes) {
    KernelContext ctx;
    bool all_const = true, reads_parameter = false;
    MOSAIC_RETURN_IF_ERROR(node_context(g, node, parameter_derived, &ctx, &all_const, &reads_parameter));
    auto outs = infer_node(ctx);
    const bool run_time_shape = !outs.ok() && ctx.asked_unknown_value && opt.specialise;
    if (run_time_shape) {
      if (!specialised) {
        MOSAIC_ASSIGN_OR_RETURN(specialised, specialised_descs(g, registry, opt));
      }
      outs = planned_from_values(g, node, *specialised, &report);
    }
    if (!outs.ok()) return outs.status().with_context(g.source);
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      ctx.outputs.push_back(outs.value()[i]);
      ctx.output_present.push_back(node.has_output(i));
    }
    // Identity of a parameter always folds into a parameter of its own: PyTorch's exporter
    // writes equal-valued parameters (every LayerNorm weight starts as ones) as one
    // initializer and Identity nodes, and they must train apart, as in PyTorch.
    const bool foldable = (all_const && (opt.fold_parameters || !reads_parameter || node.op_type == "Identity")) ||
                          node.op_type == "Shape" || node.op_type == "Size";
    if (reads_parameter && node.op_type != "Shape" && node.op_type != "Size")
      for (const auto& o : node.outputs) parameter_derived.insert(o);
    if (foldable) {
      MOSAIC_ASSIGN_OR_RETURN(std::vector<Tensor> results, fold_node(g, node, ctx, registry, opt));
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (!node.has_output(i)) continue;
        g.initializers[node.outputs[i]] = results[i];
        g.value_descs[node.outputs[i]] = results[i].desc();
        if (!reads_parameter) g.constants.insert(node.outputs[i]);
      }
      remember_dequantized(g, node);
      ++report.folded_nodes;
      continue;
    }
    for (size_t i = 0; i < node.outputs.size(); ++i)
      if (node.has_output(i)) g.value_descs[node.outputs[i]] = ctx.outputs[i];
    kept.push_back(node);
    if (run_time_shape) kept.back().attrs[kRunTimeShapeAttr] = Attribute::of_int(1);
  }
  g.nodes = std::move(kept);

  for (const auto& out : g.outputs)
    if (!g.value_descs.count(out.name))
      return Status::invalid(g.source + ": graph output '" + out.name + "' is never computed");

  // Drop initializers nothing uses any more (folded shape constants, unused weights).
  report.removed_initializers = drop_unused_initializers(g);
  return report;
}

int drop_unused_initializers(Graph& g) {
  std::set<std::string> used;
  for (const auto& n : g.nodes) used.insert(n.inputs.begin(), n.inputs.end());
  for (const auto& o : g.outputs) used.insert(o.name);
  int dropped = 0;
  for (auto it = g.initializers.begin(); it != g.initializers.end();) {
    if (!used.count(it->first)) {
      g.constants.erase(it->first);
      g.dequantized.erase(it->first);
      it = g.initializers.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

}  // namespace mosaic
