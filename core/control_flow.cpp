#include "core/control_flow.hpp"

#include <cstring>
#include <memory>

#include "core/plan.hpp"
#include "ir/checked.hpp"
#include "ir/elements.hpp"
#include "ir/interrupt.hpp"
#include "operators/control_flow.hpp"
#include "operators/params.hpp"

namespace mosaic {
namespace {

thread_local const SubgraphScope* t_scope = nullptr;

size_t declared_inputs(const Node& n) { return n.inputs.size() - n.outer_scope_inputs(); }

/// The values of a Loop body's declared inputs known before it runs: the iteration number 0,
/// and the condition and loop-carried values where they are constants (undefined elsewhere).
std::vector<Tensor> first_iteration(const OpContext& c) {
  std::vector<Tensor> v{Tensor::from_i64({}, {0})};
  for (size_t i = 1; i < declared_inputs(*c.node); ++i) {
    const Tensor* t = i < c.constants.size() ? c.constants[i] : nullptr;  // not constant(): no value is needed
    v.push_back(t ? *t : Tensor());
  }
  return v;
}

/// `body` ready to plan: its declared inputs given `declared`'s descriptors, the outer values
/// it may read bound (constants as initializers, the rest as further inputs, in the node's
/// order), prepared (inferred and folded). Where `values` is given, each of its defined
/// tensors is bound as the declared input's value (a Loop body planned for one iteration).
Expected<Graph> instantiate(const Graph& body, const std::string& what, const std::vector<TensorDesc>& declared,
                            const OpContext& ctx, const KernelRegistry& registry, const PrepareOptions& options,
                            const std::vector<Tensor>* values = nullptr) {
  const Node& n = *ctx.node;
  Graph g = body;
  g.opset = ctx.opset;
  if (g.inputs.size() != declared.size())
    return Status::invalid(n.label() + ": " + what + " takes " + std::to_string(g.inputs.size()) + " inputs; " +
                           n.op_type + " gives it " + std::to_string(declared.size()));
  for (size_t i = 0; i < declared.size(); ++i) {
    ValueInfo& in = g.inputs[i];
    in.dtype = declared[i].dtype;
    in.dims = declared[i].shape;
    in.dim_params.assign(in.dims.size(), "");
    in.has_shape = true;
  }
  auto it = n.attrs.find("mosaic.outer_scope");
  if (it != n.attrs.end()) {
    const size_t first = declared_inputs(n);
    for (size_t j = 0; j < it->second.strings.size(); ++j) {
      const std::string& name = it->second.strings[j];
      const size_t k = first + j;
      if (const Tensor* c = ctx.constant(k)) {
        g.initializers[name] = *c;
        g.constants.insert(name);
      } else {
        g.inputs.push_back(ValueInfo{name, ctx.inputs[k].dtype, ctx.inputs[k].shape, {}, true});
      }
    }
  }
  if (values) {
    std::vector<ValueInfo> kept;
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      if (i >= values->size() || !(*values)[i].defined()) {
        kept.push_back(g.inputs[i]);
        continue;
      }
      g.initializers[g.inputs[i].name] = (*values)[i];
      g.constants.insert(g.inputs[i].name);
    }
    g.inputs = std::move(kept);
  }
  PrepareOptions sub;
  sub.fold_backend = options.fold_backend;
  auto report = prepare_graph(g, registry, sub);
  if (!report.ok()) return report.status().with_context(n.label() + ", " + what);
  return g;
}

std::vector<TensorDesc> output_descs(const Graph& g) {
  std::vector<TensorDesc> out;
  for (const ValueInfo& o : g.outputs) out.push_back(g.value_descs.at(o.name));
  return out;
}

std::string desc_str(const TensorDesc& d) { return std::string(dtype_name(d.dtype)) + " " + shape_str(d.shape); }

Shape without_axis(Shape s, int64_t axis) {
  s.erase(s.begin() + axis);
  return s;
}

Shape with_axis(Shape s, int64_t axis, int64_t size) {
  s.insert(s.begin() + axis, size);
  return s;
}

/// The descriptors a Loop body's declared inputs get: iteration number, condition, the
/// loop-carried values.
std::vector<TensorDesc> loop_body_inputs(const OpContext& c) {
  std::vector<TensorDesc> d{{DType::kI64, {}}, {DType::kBool, {}}};
  for (size_t i = 2; i < declared_inputs(*c.node); ++i) d.push_back(c.inputs[i]);
  return d;
}

std::vector<TensorDesc> scan_body_inputs(const OpContext& c, const ScanParams& p) {
  std::vector<TensorDesc> d;
  for (int64_t i = 0; i < p.states; ++i) d.push_back(c.inputs[static_cast<size_t>(i)]);
  for (int64_t m = 0; m < p.scan_inputs; ++m) {
    const TensorDesc& x = c.inputs[static_cast<size_t>(p.states + m)];
    d.push_back({x.dtype, without_axis(x.shape, p.in_axes[static_cast<size_t>(m)])});
  }
  return d;
}

/// Loop's trip count where it is a constant; kNoTripCount where M is omitted, kRunTimeTrips
/// where it is computed at run time.
constexpr int64_t kNoTripCount = -1, kRunTimeTrips = -2;
Expected<int64_t> trip_count(const OpContext& c) {
  if (!c.has_input(0)) return kNoTripCount;
  if (c.inputs[0].numel() != 1 || !dtype_is_integer(c.inputs[0].dtype))
    return Status::invalid(c.node->label() + ": the trip count M must be one integer");
  const Tensor* m = c.constant(0);
  if (!m) return kRunTimeTrips;
  return std::max<int64_t>(0, m->get_i64(0));
}

/// Loop's and Scan's outputs: the carried values keep their descriptors (Mosaic plans
/// static shapes), the scan outputs stack T of the body's along `axes`.
Expected<std::vector<TensorDesc>> stacked_outputs(const OpContext& c, const std::vector<TensorDesc>& body_out,
                                                  size_t first_carried, const std::vector<TensorDesc>& carried,
                                                  int64_t steps, const std::vector<int64_t>& axes) {
  const Node& n = *c.node;
  std::vector<TensorDesc> out;
  for (size_t i = 0; i < carried.size(); ++i) {
    const TensorDesc& b = body_out[first_carried + i];
    if (b.dtype != carried[i].dtype || b.shape != carried[i].shape)
      return Status::unsupported(n.label() + ": the body turns loop-carried value " + std::to_string(i) + " from " +
                                 desc_str(carried[i]) + " into " + desc_str(b) +
                                 "; Mosaic plans static shapes and types");
    out.push_back(b);
  }
  for (size_t k = first_carried + carried.size(); k < body_out.size(); ++k) {
    const size_t j = k - first_carried - carried.size();
    const int64_t rank = static_cast<int64_t>(body_out[k].shape.size()) + 1;
    int64_t axis = j < axes.size() ? axes[j] : 0;
    MOSAIC_ASSIGN_OR_RETURN(axis, normalize_axis(axis, rank, n));
    out.push_back({body_out[k].dtype, with_axis(body_out[k].shape, axis, steps)});
  }
  return out;
}

Expected<std::vector<TensorDesc>> infer(const OpContext& c) {
  if (!t_scope) return Status::internal(c.node->label() + ": no subgraph scope");
  const KernelRegistry& reg = t_scope->registry;
  const PrepareOptions& opt = t_scope->options;
  const Node& n = *c.node;
  if (n.op_type == "If") {
    const Graph *then_g = n.attr_graph("then_branch"), *else_g = n.attr_graph("else_branch");
    if (!then_g || !else_g) return Status::invalid(n.label() + ": needs then_branch and else_branch graphs");
    if (c.inputs[0].numel() != 1) return Status::invalid(n.label() + ": the condition must be one value");
    if (const Tensor* cond = c.constant(0)) {  // the branch is known: only it counts
      MOSAIC_ASSIGN_OR_RETURN(Graph g, instantiate(cond->get(0) != 0 ? *then_g : *else_g,
                                                   cond->get(0) != 0 ? "then_branch" : "else_branch", {}, c, reg, opt));
      return output_descs(g);
    }
    MOSAIC_ASSIGN_OR_RETURN(Graph a, instantiate(*then_g, "then_branch", {}, c, reg, opt));
    MOSAIC_ASSIGN_OR_RETURN(Graph b, instantiate(*else_g, "else_branch", {}, c, reg, opt));
    const auto da = output_descs(a), db = output_descs(b);
    if (da.size() != n.outputs.size() || db.size() != n.outputs.size())
      return Status::invalid(n.label() + ": the branches give " + std::to_string(da.size()) + " and " +
                             std::to_string(db.size()) + " outputs for " + std::to_string(n.outputs.size()));
    for (size_t i = 0; i < da.size(); ++i)
      if (da[i].dtype != db[i].dtype || da[i].shape != db[i].shape)
        return Status::unsupported(n.label() + ": output " + std::to_string(i) + " is " + desc_str(da[i]) +
                                   " from then_branch and " + desc_str(db[i]) +
                                   " from else_branch; Mosaic plans static shapes");
    return da;
  }
  if (n.op_type == "Loop") {
    const Graph* body = n.attr_graph("body");
    if (!body) return Status::invalid(n.label() + ": needs a body graph");
    if (declared_inputs(n) < 2)
      return Status::invalid(n.label() + ": Loop takes M and cond (either may be empty) before its loop-carried values");
    if (c.has_input(1) && (c.inputs[1].dtype != DType::kBool || c.inputs[1].numel() != 1))
      return Status::invalid(n.label() + ": cond must be one bool, got " + desc_str(c.inputs[1]));
    const std::vector<TensorDesc> in = loop_body_inputs(c);
    auto planned = instantiate(*body, "body", in, c, reg, opt);
    if (!planned.ok()) {
      // Shapes that depend on the iteration's values (a Slice at the iteration number): the
      // body as at iteration 0, with the values known here; LoopKernel then plans each
      // iteration with its own values and checks them against these shapes.
      const std::vector<Tensor> first = first_iteration(c);
      auto probe = instantiate(*body, "body", in, c, reg, opt, &first);
      if (!probe.ok()) return planned.status();
      planned = std::move(probe);
    }
    const Graph& g = planned.value();
    const auto out = output_descs(g);
    const size_t carried = in.size() - 2;
    if (out.size() < carried + 1 || out.size() - 1 - carried != n.outputs.size() - carried || n.outputs.size() < carried)
      return Status::invalid(n.label() + ": the body gives " + std::to_string(out.size()) + " outputs for " +
                             std::to_string(carried) + " loop-carried values and " + std::to_string(n.outputs.size()) +
                             " node outputs");
    if (out[0].dtype != DType::kBool || out[0].numel() != 1)
      return Status::invalid(n.label() + ": the body's first output (the condition) is " + desc_str(out[0]));
    MOSAIC_ASSIGN_OR_RETURN(int64_t steps, trip_count(c));
    const bool scans = out.size() > carried + 1;
    if (scans && steps < 0)
      return Status::unsupported(n.label() + std::string(": scan outputs without a trip count ") +
                                 (steps == kRunTimeTrips ? "known at load (M is computed at run time)" : "(M is omitted)") +
                                 " have a length known only at run time; Mosaic plans static shapes");
    if (scans && steps > kMaxDim)
      return Status::invalid(n.label() + ": trip count " + std::to_string(steps) + " beyond 2^31 - 1 scan rows");
    return stacked_outputs(c, out, 1, std::vector<TensorDesc>(in.begin() + 2, in.end()), steps, {});
  }
  // Scan
  const Graph* body = n.attr_graph("body");
  if (!body) return Status::invalid(n.label() + ": needs a body graph");
  MOSAIC_ASSIGN_OR_RETURN(ScanParams p, scan_params(c));
  const std::vector<TensorDesc> in = scan_body_inputs(c, p);
  MOSAIC_ASSIGN_OR_RETURN(Graph g, instantiate(*body, "body", in, c, reg, opt));
  const auto out = output_descs(g);
  if (static_cast<int64_t>(out.size()) != p.states + p.scan_outputs)
    return Status::invalid(n.label() + ": the body gives " + std::to_string(out.size()) + " outputs, the node has " +
                           std::to_string(n.outputs.size()));
  return stacked_outputs(c, out, 0, std::vector<TensorDesc>(in.begin(), in.begin() + p.states), p.length, p.out_axes);
}

/// A subgraph's plan and where each of its run-time inputs comes from.
struct SubPlan {
  std::unique_ptr<Plan> plan;
  std::vector<int> node_input;  ///< per plan input past the declared ones: the node's input index
  size_t declared = 0;
};

Expected<SubPlan> plan_for(const Graph& body, const std::string& what, const std::vector<TensorDesc>& declared,
                           const KernelContext& ctx, const KernelRegistry& registry, const std::string& backend,
                           const std::vector<Tensor>* values = nullptr) {
  MOSAIC_ASSIGN_OR_RETURN(Graph g, instantiate(body, what, declared, ctx, registry, PrepareOptions{}, values));
  SubPlan s;
  s.declared = declared.size();
  if (values)
    for (size_t i = 0; i < values->size() && i < declared.size(); ++i) s.declared -= (*values)[i].defined();
  const Node& n = *ctx.node;
  const size_t first = declared_inputs(n);
  static const std::vector<std::string> kNone;
  auto it = n.attrs.find("mosaic.outer_scope");
  const std::vector<std::string>& outer = it == n.attrs.end() ? kNone : it->second.strings;
  for (size_t i = s.declared; i < g.inputs.size(); ++i)
    for (size_t j = 0; j < outer.size(); ++j)
      if (outer[j] == g.inputs[i].name) s.node_input.push_back(static_cast<int>(first + j));
  auto plan = Plan::build(g, Placement::all_on(backend, {}), registry);
  if (!plan.ok()) return plan.status().with_context(n.label() + ", " + what);
  s.plan = std::move(plan).value();
  return s;
}

/// Runs a subgraph: `declared` values, then the outer values from the node's inputs.
Status run_sub(SubPlan& s, std::vector<Tensor> declared, const std::vector<const Tensor*>& src,
               std::vector<Tensor>* outputs) {
  for (int k : s.node_input) declared.push_back(*src[static_cast<size_t>(k)]);
  return s.plan->run(declared, outputs);
}

Status copy_out(const Tensor& from, Tensor* to, const Node& n, size_t i) {
  if (!to) return Status::ok();
  if (from.dtype() != to->dtype() || from.shape() != to->shape())
    return Status::invalid(n.label() + ": output " + std::to_string(i) + " is " + desc_str(from.desc()) +
                           " at run time, planned as " + desc_str(to->desc()));
  if (from.bytes()) std::memcpy(to->data(), from.data(), from.bytes());
  return Status::ok();
}

/// Bytes of slice `index` along `axis` of a tensor of `shape` (element size `esize`):
/// calls f(slice_offset, tensor_offset, bytes) per contiguous run.
template <class F>
void each_run(const Shape& shape, int64_t axis, int64_t index, size_t esize, F&& f) {
  int64_t outer = 1, inner = static_cast<int64_t>(esize);
  for (int64_t d = 0; d < axis; ++d) outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < outer; ++o) f(o * inner, (o * len + index) * inner, inner);
}

Tensor slice_of(const Tensor& t, int64_t axis, int64_t index) {
  Tensor s = Tensor::empty({t.dtype(), without_axis(t.shape(), axis)});
  const auto* from = static_cast<const char*>(t.data());
  auto* to = static_cast<char*>(s.data());
  each_run(t.shape(), axis, index, dtype_size(t.dtype()),
           [&](int64_t so, int64_t to_off, int64_t bytes) { std::memcpy(to + so, from + to_off, static_cast<size_t>(bytes)); });
  return s;
}

void put_slice(const Tensor& slice, Tensor* t, int64_t axis, int64_t index) {
  const auto* from = static_cast<const char*>(slice.data());
  auto* to = static_cast<char*>(t->data());
  each_run(t->shape(), axis, index, dtype_size(t->dtype()),
           [&](int64_t so, int64_t to_off, int64_t bytes) { std::memcpy(to + to_off, from + so, static_cast<size_t>(bytes)); });
}

/// What the three control-flow kernels share: the registry and backend their subgraphs'
/// plans are built with, and the node (for messages).
class SubgraphKernel : public Kernel {
 public:
  SubgraphKernel(const KernelRegistry& r, std::string backend) : registry_(r), backend_(std::move(backend)) {}

 protected:
  Expected<SubPlan> plan(const Graph& body, const std::string& what, const std::vector<TensorDesc>& declared,
                         const KernelContext& ctx, const std::vector<Tensor>* values = nullptr) {
    return plan_for(body, what, declared, ctx, registry_, backend_, values);
  }
  const KernelRegistry& registry_;
  std::string backend_;
  const Node* node_ = nullptr;
};

class IfKernel final : public SubgraphKernel {
 public:
  using SubgraphKernel::SubgraphKernel;
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    const Tensor* cond = ctx.constant(0);
    if (!cond || cond->get(0) != 0) {
      MOSAIC_ASSIGN_OR_RETURN(then_, plan(*node_->attr_graph("then_branch"), "then_branch", {}, ctx));
    }
    if (!cond || cond->get(0) == 0) {
      MOSAIC_ASSIGN_OR_RETURN(else_, plan(*node_->attr_graph("else_branch"), "else_branch", {}, ctx));
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    SubPlan& s = src[0]->get(0) != 0 ? then_ : else_;
    std::vector<Tensor> out;
    MOSAIC_RETURN_IF_ERROR(run_sub(s, {}, src, &out));
    for (size_t i = 0; i < dst.size() && i < out.size(); ++i) MOSAIC_RETURN_IF_ERROR(copy_out(out[i], dst[i], *node_, i));
    return Status::ok();
  }

 private:
  SubPlan then_, else_;
};

Tensor scalar_i64(int64_t v) { return Tensor::from_i64({}, {v}); }
Tensor scalar_bool(bool v) {
  Tensor t = Tensor::empty({DType::kBool, {}});
  static_cast<uint8_t*>(t.data())[0] = v;
  return t;
}

class LoopKernel final : public SubgraphKernel {
 public:
  using SubgraphKernel::SubgraphKernel;
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    MOSAIC_ASSIGN_OR_RETURN(steps_, trip_count(ctx));
    carried_ = declared_inputs(*node_) - 2;
    has_cond_ = ctx.has_input(1);
    auto planned = plan(*node_->attr_graph("body"), "body", loop_body_inputs(ctx), ctx);
    if (planned.ok()) {
      body_ = std::move(planned).value();
      return Status::ok();
    }
    // A body whose shapes depend on the iteration's values (infer planned it as at
    // iteration 0): each iteration is prepared and planned with its values bound. Refused
    // here, as before, unless iteration 0 can be planned that way.
    const std::vector<Tensor> first = first_iteration(ctx);
    auto probe = plan(*node_->attr_graph("body"), "body", loop_body_inputs(ctx), ctx, &first);
    if (!probe.ok()) return planned.status();
    // Kept for the iterations: the context, with the constants it points to (the outer
    // values the body reads) held here rather than in the enclosing plan's storage.
    ctx_ = ctx;
    constants_.assign(ctx.constants.size(), Tensor());
    for (size_t k = 0; k < ctx.constants.size(); ++k) {
      if (ctx.constants[k]) constants_[k] = ctx.constants[k]->clone();
      ctx_.constants[k] = ctx.constants[k] ? &constants_[k] : nullptr;
    }
    descs_ = loop_body_inputs(ctx);
    per_iteration_ = true;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    std::vector<Tensor> values;
    for (size_t i = 0; i < carried_; ++i) values.push_back(src[2 + i]->clone());
    const int64_t steps = steps_ == kRunTimeTrips ? std::max<int64_t>(0, src[0]->get_i64(0)) : steps_;
    bool cond = has_cond_ ? src[1]->get(0) != 0 : true;
    int64_t i = 0;
    const size_t scans = dst.size() - carried_;
    for (; (steps < 0 || i < steps) && cond; ++i) {
      if (interrupted()) return Status::io_error(node_->label() + ": interrupted (SIGINT or SIGTERM) at iteration " + std::to_string(i));
      std::vector<Tensor> in{scalar_i64(i), scalar_bool(cond)};
      for (const Tensor& v : values) in.push_back(v);
      std::vector<Tensor> out;
      if (per_iteration_) {
        MOSAIC_ASSIGN_OR_RETURN(SubPlan once, plan(*node_->attr_graph("body"), "body", descs_, ctx_, &in));
        MOSAIC_RETURN_IF_ERROR(run_sub(once, {}, src, &out).with_context("iteration " + std::to_string(i)));
      } else {
        MOSAIC_RETURN_IF_ERROR(run_sub(body_, std::move(in), src, &out));
      }
      cond = out[0].get(0) != 0;
      for (size_t k = 0; k < carried_; ++k) {
        if (per_iteration_ && (out[1 + k].shape() != values[k].shape() || out[1 + k].dtype() != values[k].dtype()))
          return Status::invalid(node_->label() + ": the body turns loop-carried value " + std::to_string(k) + " from " +
                                 desc_str(values[k].desc()) + " to " + desc_str(out[1 + k].desc()) + " at iteration " +
                                 std::to_string(i) + "; Mosaic plans static shapes");
        values[k] = out[1 + k].clone();
      }
      for (size_t k = 0; k < scans; ++k) {
        Tensor* y = dst[carried_ + k];
        if (!y) continue;
        const Tensor& row = out[1 + carried_ + k];
        if (row.shape() != without_axis(y->shape(), 0) || row.dtype() != y->dtype())
          return Status::invalid(node_->label() + ": scan output " + std::to_string(k) + " is " + desc_str(row.desc()) +
                                 " at iteration " + std::to_string(i) + ", planned as rows of " + desc_str(y->desc()));
        put_slice(row, y, 0, i);
      }
    }
    if (scans > 0 && i != steps)
      return Status::unsupported(node_->label() + ": the loop stopped after " + std::to_string(i) + " of " +
                                 std::to_string(steps) + " iterations, so its scan outputs would have " +
                                 std::to_string(i) + " rows; Mosaic planned " + std::to_string(steps) +
                                 " (static shapes)");
    for (size_t k = 0; k < carried_; ++k) MOSAIC_RETURN_IF_ERROR(copy_out(values[k], dst[k], *node_, k));
    return Status::ok();
  }

 private:
  int64_t steps_ = -1;
  size_t carried_ = 0;
  bool has_cond_ = false;
  SubPlan body_;
  // A body planned per iteration: the node's context, its constants' values and the
  // declared inputs' descriptors.
  bool per_iteration_ = false;
  KernelContext ctx_;
  std::vector<Tensor> constants_;
  std::vector<TensorDesc> descs_;
};

class ScanKernel final : public SubgraphKernel {
 public:
  using SubgraphKernel::SubgraphKernel;
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    MOSAIC_ASSIGN_OR_RETURN(p_, scan_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(body_, plan(*node_->attr_graph("body"), "body", scan_body_inputs(ctx, p_), ctx));
    for (int64_t k = 0; k < p_.scan_outputs; ++k) {
      const int64_t rank = static_cast<int64_t>(ctx.outputs[static_cast<size_t>(p_.states + k)].shape.size());
      MOSAIC_ASSIGN_OR_RETURN(p_.out_axes[static_cast<size_t>(k)],
                              normalize_axis(p_.out_axes[static_cast<size_t>(k)], rank, *node_));
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t n = static_cast<size_t>(p_.states);
    std::vector<Tensor> states;
    for (size_t i = 0; i < n; ++i) states.push_back(src[i]->clone());
    for (int64_t t = 0; t < p_.length; ++t) {
      if (interrupted()) return Status::io_error(node_->label() + ": interrupted (SIGINT or SIGTERM) at step " + std::to_string(t));
      std::vector<Tensor> in = states;
      for (int64_t m = 0; m < p_.scan_inputs; ++m) {
        const size_t mi = static_cast<size_t>(m);
        in.push_back(slice_of(*src[n + mi], p_.in_axes[mi], p_.in_reverse[mi] ? p_.length - 1 - t : t));
      }
      std::vector<Tensor> out;
      MOSAIC_RETURN_IF_ERROR(run_sub(body_, std::move(in), src, &out));
      for (size_t i = 0; i < n; ++i) states[i] = out[i].clone();
      for (int64_t k = 0; k < p_.scan_outputs; ++k) {
        const size_t ki = static_cast<size_t>(k);
        Tensor* y = dst[n + ki];
        if (!y) continue;
        const Tensor& row = out[n + ki];
        if (row.shape() != without_axis(y->shape(), p_.out_axes[ki]) || row.dtype() != y->dtype())
          return Status::invalid(node_->label() + ": scan output " + std::to_string(k) + " is " + desc_str(row.desc()) +
                                 " at step " + std::to_string(t) + ", planned as slices of " + desc_str(y->desc()));
        put_slice(row, y, p_.out_axes[ki], p_.out_reverse[ki] ? p_.length - 1 - t : t);
      }
    }
    for (size_t i = 0; i < n; ++i) MOSAIC_RETURN_IF_ERROR(copy_out(states[i], dst[i], *node_, i));
    return Status::ok();
  }

 private:
  ScanParams p_;
  SubPlan body_;
};

template <class K>
KernelFactory control_flow_factory(const KernelRegistry& registry, const std::string& backend) {
  return [&registry, backend](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<K>(registry, backend);
    MOSAIC_RETURN_IF_ERROR(k->init(ctx));
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

}  // namespace

SubgraphScope::SubgraphScope(const KernelRegistry& r, const PrepareOptions& o)
    : registry(r), options(o), previous_(t_scope) {
  t_scope = this;
  set_subgraph_inference(&infer);
}

SubgraphScope::~SubgraphScope() { t_scope = previous_; }

void add_control_flow_kernels(BackendRegistration& r) {
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  r.kernel("If", control_flow_factory<IfKernel>(r.registry(), r.name()), any);
  r.kernel("Loop", control_flow_factory<LoopKernel>(r.registry(), r.name()), any);
  r.kernel("Scan", control_flow_factory<ScanKernel>(r.registry(), r.name()), any);
}

}  // namespace mosaic
