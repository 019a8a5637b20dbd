#include "validate/per_node.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "backends/common/pooling.hpp"
#include "core/loss.hpp"
#include "metrics/compare.hpp"
#include "operators/eltwise.hpp"
#include "operators/params.hpp"

namespace mosaic {

namespace {

/// Elements of a piecewise node's input that lie exactly on a kink of its op's row
/// (operators/eltwise.hpp: Relu and LeakyRelu at 0, Clip at either bound, ...). There the
/// derivative is one-sided and conventions differ (naive passes the gradient on Clip's
/// closed interval, as torch.clamp; oneDNN's clip_v2 on the open one, as nn.ReLU6), so the
/// input gradient is not compared there. Empty for other ops.
std::vector<int64_t> kink_elements(const Graph& graph, const Node& n, const std::map<std::string, Tensor>& value) {
  std::vector<int64_t> at;
  const auto op = unary_op_of(n.op_key());
  if (!op || unary_info(*op).kinks == 0 || n.inputs.empty() || !value.count(n.inputs[0])) return at;
  const Tensor& x = value.at(n.inputs[0]);
  // The attributes as every kernel reads them (Clip's bounds: attributes before opset 11,
  // constant inputs after).
  KernelContext ctx;
  ctx.node = &n;
  ctx.opset = graph.opset;
  for (const auto& name : n.inputs) {
    const Tensor* t = graph.initializers.count(name) ? &graph.initializers.at(name)
                      : value.count(name)             ? &value.at(name)
                                                      : nullptr;
    ctx.input_present.push_back(!name.empty());
    ctx.constants.push_back(t);
  }
  const UnaryArgs args = unary_args(*op, ctx);
  std::vector<double> kinks;  // an absent Clip bound is infinite and matches nothing
  for (int k = 0; k < unary_info(*op).kinks; ++k) kinks.push_back(unary_info(*op).kink(k, args));
  if (x.dtype() != DType::kF32) return at;
  for (int64_t e = 0; e < x.numel(); ++e)
    if (std::find(kinks.begin(), kinks.end(), static_cast<double>(x.f32()[e])) != kinks.end()) at.push_back(e);
  return at;
}

/// Max pooling's input gradient with every window's gradient routed to its exact maximum
/// (the first of exactly equal ones): PyTorch's rule. Mosaic's backends, naive included,
/// route a window whose two largest values are within kMaxPoolTieRtol (float noise of
/// equal values) to the first of them; either is a valid subgradient, so a backend that
/// matches this one is not a divergence. An undefined tensor for other nodes.
Tensor exact_maximum_gradient(const Graph& graph, const Node& n, const std::map<std::string, Tensor>& value,
                              const Tensor& dy) {
  if (n.op_type != "MaxPool" || n.inputs.empty() || !value.count(n.inputs[0]) || n.outputs.size() > 1) return {};
  const Tensor& x = value.at(n.inputs[0]);
  if (x.dtype() != DType::kF32 || x.rank() < 3 || dy.dtype() != DType::kF32) return {};
  KernelContext ctx;
  ctx.node = &n;
  ctx.opset = graph.opset;
  ctx.inputs = {x.desc()};
  ctx.input_present = {true};
  ctx.outputs = {dy.desc()};
  ctx.output_present = {true};
  const auto p = pool_params(ctx);
  if (!p.ok() || p->win.rank() > 3) return {};
  Tensor dx = Tensor::empty(x.desc());
  max_pool_backward(x.f32(), dy.f32(), dx.f32(), x.dim(0) * x.dim(1), p->win, 0.f);
  return dx;
}

/// Node `n` of `graph` alone: its runtime inputs become graph inputs (named in `fed`, in
/// order), its constant inputs stay initializers, its outputs are the graph's.
Graph single_node_graph(const Graph& graph, const Node& n, std::vector<std::string>* fed) {
  Graph one;
  one.source = graph.source;
  one.opset = graph.opset;
  one.nodes.push_back(n);
  for (const auto& in : n.inputs) {
    if (in.empty() || one.initializers.count(in)) continue;
    auto init = graph.initializers.find(in);
    if (init != graph.initializers.end()) {
      one.initializers[in] = init->second;
    } else if (std::find(fed->begin(), fed->end(), in) == fed->end()) {
      const TensorDesc& d = graph.value_descs.at(in);
      one.inputs.push_back(ValueInfo{in, d.dtype, d.shape, {}, true});
      fed->push_back(in);
    }
    one.value_descs[in] = graph.value_descs.at(in);
  }
  for (const auto& o : n.outputs)
    if (!o.empty()) {
      one.outputs.push_back(ValueInfo{o, graph.value_descs.at(o).dtype, graph.value_descs.at(o).shape, {}, true});
      one.value_descs[o] = graph.value_descs.at(o);
    }
  return one;
}

/// Whether output `k` of `n` is a quantised code that an op rounds from a float product
/// (QuantizeLinear, QLinearConv, the com.microsoft QLinear ops, QGemm with y_scale, ...): two
/// correct kernels may round a product within a float's rounding of a tie to neighbouring
/// codes (float32 against double requantisation), so such outputs may differ by one code,
/// as `verify` allows by default. Other integer outputs (shapes, indices) match exactly.
bool rounded_code(const Node& n, const Tensor& t) {
  const bool quantising = n.op_type == "QuantizeLinear" || n.op_type == "DynamicQuantizeLinear" ||
                          n.op_type.rfind("QLinear", 0) == 0 || n.op_type == "QGemm";
  const DType d = t.dtype();
  return quantising && (d == DType::kU8 || d == DType::kI8 || d == DType::kU16 || d == DType::kI16 ||
                        d == DType::kU4 || d == DType::kI4 || d == DType::kU2 || d == DType::kI2);
}

/// compare_tensors, with a rounded code allowed one step (rounded_code).
Agreement compare_output(const Node& n, const Tensor& got, const Tensor& want, double rtol, double atol) {
  Agreement a = compare_tensors(got, want, rtol, atol);
  if (a.ok || !rounded_code(n, want) || got.shape() != want.shape() || got.dtype() != want.dtype()) return a;
  if (a.max_abs > 1) {
    a.message += " (a quantised code may differ by one step, no more)";
    return a;
  }
  a.ok = true;
  a.message.clear();
  return a;
}

/// Folds one comparison into a node's row.
void add_comparison(NodeAgreement& a, const Agreement& c, const std::string& what) {
  a.max_abs = std::max(a.max_abs, c.max_abs);
  a.max_rel = std::max(a.max_rel, c.max_rel);
  a.rel_l2 = std::max(a.rel_l2, c.rel_l2);
  if (!c.ok && a.ok) {
    a.ok = false;
    a.note = what + " " + c.message;
  }
}

}  // namespace

Graph with_every_value_as_output(const Graph& graph) {
  Graph all = graph;
  std::set<std::string> listed;
  for (const auto& o : all.outputs) listed.insert(o.name);
  for (const auto& n : graph.nodes)
    for (const auto& o : n.outputs)
      if (!o.empty() && !listed.count(o)) {
        all.outputs.push_back(ValueInfo{o, graph.value_descs.at(o).dtype, graph.value_descs.at(o).shape, {}, true});
        listed.insert(o);
      }
  return all;
}

Expected<PerNodeReport> compare_per_node(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                         const std::vector<Tensor>& inputs, double rtol, double atol) {
  // Naive once, with every node output made a graph output so that none is reused.
  const Graph all = with_every_value_as_output(graph);
  MOSAIC_ASSIGN_OR_RETURN(auto naive, Plan::build(all, Placement::all_on("naive", {}), registry));
  std::vector<Tensor> outs;
  MOSAIC_RETURN_IF_ERROR(naive->run(inputs, &outs));
  std::map<std::string, Tensor> value;
  for (size_t i = 0; i < graph.inputs.size() && i < inputs.size(); ++i) value[graph.inputs[i].name] = inputs[i];
  for (size_t i = 0; i < all.outputs.size(); ++i) value[all.outputs[i].name] = outs[i];

  PerNodeReport report;
  for (const auto& n : graph.nodes) {
    // The first output the node has (an LSTM whose Y is omitted has only Y_h, output 1).
    const auto first = std::find_if(n.outputs.begin(), n.outputs.end(), [](const std::string& o) { return !o.empty(); });
    if (first == n.outputs.end()) continue;
    NodeAgreement a(n.name, n.op_type, placement.backend_for(n));
    std::vector<std::string> fed;
    const Graph one = single_node_graph(graph, n, &fed);
    std::vector<Tensor> feed;
    for (const auto& in : fed) feed.push_back(value.at(in));
    auto plan = Plan::build(one, Placement::all_on(a.backend, {}), registry);
    if (!plan.ok()) {
      if (plan.status().code() != StatusCode::kUnsupported) return plan.status();
      a.ran = false;
      a.note = plan.status().message();
      report.nodes.push_back(a);
      continue;
    }
    std::vector<Tensor> got;
    MOSAIC_RETURN_IF_ERROR(plan.value()->run(feed, &got).with_context(n.label()));
    // Every output, whatever its element type: float ones within the tolerances, integer
    // ones exactly (a Shape, an ArgMax) or, for a quantised code, within one step.
    for (size_t k = 0; k < got.size(); ++k)
      add_comparison(a, compare_output(n, got[k], value.at(one.outputs[k].name), rtol, atol),
                     "output '" + one.outputs[k].name + "'");
    if (!a.ok && report.first_divergent < 0) report.first_divergent = static_cast<int>(report.nodes.size());
    report.nodes.push_back(a);
  }
  return report;
}

Expected<PerNodeReport> compare_per_node_backward(const Graph& graph, const KernelRegistry& registry,
                                                  const Placement& placement, const std::vector<Tensor>& inputs,
                                                  const Tensor& labels, double rtol, double atol) {
  // One naive training step on the whole graph, every value an output: its forward values
  // and the gradient arriving at every value.
  const Graph all = with_every_value_as_output(graph);
  PlanOptions po;
  po.training = true;
  MOSAIC_ASSIGN_OR_RETURN(auto naive, Plan::build(all, Placement::all_on("naive", {}), registry, po));
  std::vector<Tensor> outs;
  MOSAIC_RETURN_IF_ERROR(naive->run(inputs, &outs));
  Tensor d = Tensor::empty(naive->output(0).desc());
  MOSAIC_RETURN_IF_ERROR(softmax_cross_entropy(naive->output(0), labels, &d).status());
  std::vector<Tensor> seeds{d};
  for (size_t k = 1; k < all.outputs.size(); ++k) seeds.push_back(Tensor::empty(naive->output(k).desc()));
  MOSAIC_RETURN_IF_ERROR(naive->backward(seeds));
  std::map<std::string, Tensor> value, grad;
  for (size_t i = 0; i < graph.inputs.size() && i < inputs.size(); ++i) value[graph.inputs[i].name] = inputs[i];
  for (size_t i = 0; i < all.outputs.size(); ++i) value[all.outputs[i].name] = outs[i];
  for (const auto& v : naive->values())
    if (v.grad.defined()) grad[v.name] = v.grad.clone();

  PerNodeReport report;
  for (const auto& n : graph.nodes) {
    // Nodes a gradient flows back through: a float output that received one.
    if (n.outputs.empty() || n.outputs[0].empty() || !grad.count(n.outputs[0])) continue;
    NodeAgreement a(n.name, n.op_type, placement.backend_for(n));
    std::vector<std::string> fed;
    const Graph one = single_node_graph(graph, n, &fed);
    std::vector<Tensor> feed, dy;
    for (const auto& in : fed) feed.push_back(value.at(in));
    for (const auto& o : one.outputs)
      dy.push_back(grad.count(o.name) ? grad.at(o.name) : Tensor::empty(graph.value_descs.at(o.name)));
    // The node's backward on naive and on its backend, from the same x and dy.
    auto backward_of = [&](const std::string& backend, std::vector<Tensor>* grads,
                           std::vector<std::string>* names) -> Status {
      PlanOptions one_po;
      one_po.training = true;
      one_po.input_grads = true;
      MOSAIC_ASSIGN_OR_RETURN(auto plan, Plan::build(one, Placement::all_on(backend, {}), registry, one_po));
      MOSAIC_RETURN_IF_ERROR(plan->run(feed, nullptr));
      MOSAIC_RETURN_IF_ERROR(plan->backward(dy));
      for (size_t i = 0; i < fed.size(); ++i)
        if (const Tensor* g = plan->input_grad(i)) {
          grads->push_back(g->clone());
          names->push_back("gradient of '" + fed[i] + "'");
        }
      for (const auto& p : plan->parameters()) {
        grads->push_back(p.grad.clone());
        names->push_back("gradient of '" + p.name + "'");
      }
      return Status::ok();
    };
    std::vector<Tensor> ref, got;
    std::vector<std::string> ref_names, got_names;
    MOSAIC_RETURN_IF_ERROR(backward_of("naive", &ref, &ref_names).with_context(n.label()));
    Status st = backward_of(a.backend, &got, &got_names);
    if (!st.is_ok()) {
      if (st.code() != StatusCode::kUnsupported) return st.with_context(n.label());
      a.ran = false;
      a.note = st.message();
      report.nodes.push_back(a);
      continue;
    }
    // Input elements exactly on a kink: either one-sided derivative is right.
    const std::vector<int64_t> on_kink = kink_elements(graph, n, value);
    const std::string x_grad = n.inputs.empty() ? "" : "gradient of '" + n.inputs[0] + "'";
    for (size_t k = 0; k < got.size() && k < ref.size(); ++k) {
      if (!on_kink.empty() && ref_names[k] == x_grad && got[k].numel() == ref[k].numel()) {
        for (int64_t e : on_kink) got[k].f32()[e] = ref[k].f32()[e];
        a.note_kinks = static_cast<int64_t>(on_kink.size());
      }
      // Gradients sum many products: judged on the scale of the tensor's largest element.
      double scale = 0;
      for (int64_t e = 0; e < ref[k].numel(); ++e) scale = std::max(scale, std::fabs(ref[k].get(e)));
      Agreement c = compare_tensors(got[k], ref[k], rtol, atol + rtol * scale);
      if (!c.ok && ref_names[k] == x_grad && !dy.empty()) {
        // Near-tied max-pool windows routed to the exact maximum, as PyTorch does: valid too.
        const Tensor exact = exact_maximum_gradient(graph, n, value, dy[0]);
        if (exact.defined() && exact.numel() == got[k].numel()) {
          const Agreement e = compare_tensors(got[k], exact, rtol, atol + rtol * scale);
          if (e.ok) {
            c = e;
            a.note = "near-tied windows routed to their exact maximum (PyTorch's rule; naive takes the first)";
          }
        }
      }
      add_comparison(a, c, ref_names[k]);
    }
    if (!a.ok && report.first_divergent < 0) report.first_divergent = static_cast<int>(report.nodes.size());
    report.nodes.push_back(a);
  }
  return report;
}

}  // namespace mosaic
