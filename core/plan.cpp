#include "core/plan.hpp"

#include <algorithm>
#include <climits>
#include <set>
#include <cstring>
#include <fnmatch.h>
#include <sstream>

#include "operators/schema.hpp"

namespace mosaic {

namespace {
bool is_glob(const std::string& name) { return name.find_first_of("*?[") != std::string::npos; }
bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}
}  // namespace

Status Placement::add(const std::string& key, const std::string& backend, const KernelRegistry& registry) {
  if (!registry.has_backend(backend))
    return Status::invalid("unknown backend '" + backend + "' (known: " + [&] {
      std::string known;
      for (const auto& b : registry.backends()) known += (known.empty() ? "" : ", ") + b;
      return known;
    }() + ")");
  if (key == "*") {
    default_backend = backend;
  } else if (key.size() > 1 && key[0] == '@') {
    const std::string name = key.substr(1);
    if (is_glob(name)) by_glob.emplace_back(name, backend);
    else by_name[name] = backend;
  } else {
    if (key.empty() || key[0] == '@' || !find_schema(key)) return Status::invalid("unknown op type '" + key + "'");
    by_op[key] = backend;
  }
  return Status::ok();
}

Expected<Placement> Placement::parse(const std::string& spec, const KernelRegistry& registry) {
  Placement p;
  bool assigned = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return Status::invalid("assign spec '" + spec + "': item '" + item + "' is not KEY=BACKEND");
    MOSAIC_RETURN_IF_ERROR(p.add(item.substr(0, eq), item.substr(eq + 1), registry).with_context("assign spec '" + spec + "'"));
    assigned = true;
  }
  if (!assigned) return Status::invalid("assign spec '" + spec + "' assigns nothing");
  return p;
}

Placement Placement::all_on(const std::string& backend, std::vector<std::string> fallback) {
  Placement p;
  p.default_backend = backend;
  p.fallback = std::move(fallback);
  return p;
}

const std::string& Placement::backend_for(const Node& node) const {
  // A fused node ("conv1+relu1") follows the first of its parts that is named (or matched).
  std::vector<std::string> parts{node.name};
  for (size_t start = 0; node.name.find('+') != std::string::npos && start <= node.name.size();) {
    const size_t end = std::min(node.name.find('+', start), node.name.size());
    parts.push_back(node.name.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& part : parts)
    if (auto n = by_name.find(part); n != by_name.end()) return n->second;
  for (const auto& part : parts)
    for (const auto& [pattern, backend] : by_glob)
      if (glob_match(pattern, part)) return backend;
  auto o = by_op.find(node.op_type);
  if (o != by_op.end()) return o->second;
  return default_backend;
}

Status Placement::check_names(const Graph& graph) const {
  std::vector<std::pair<std::string, std::string>> keys(by_name.begin(), by_name.end());
  keys.insert(keys.end(), by_glob.begin(), by_glob.end());
  for (const auto& [name, backend] : keys) {
    const bool found = std::any_of(graph.nodes.begin(), graph.nodes.end(), [&](const Node& n) {
      return is_glob(name) ? glob_match(name, n.name) : n.name == name;
    });
    if (found) continue;
    std::string names;
    size_t listed = 0;
    for (const auto& n : graph.nodes) {
      if (n.name.empty()) continue;
      if (++listed > 30) {
        names += ", ... (" + std::to_string(graph.nodes.size()) + " nodes; 'mosaic info' lists them)";
        break;
      }
      names += (names.empty() ? "" : ", ") + n.name;
    }
    return Status::invalid("--assign @" + name + "=" + backend + ": " + graph.source + " has no node " +
                           (is_glob(name) ? "matching '" : "named '") + name + "' (nodes: " + names + ")");
  }
  return Status::ok();
}

std::string Placement::str() const {
  std::string s;
  for (const auto& [k, v] : by_name) s += "@" + k + "=" + v + ",";
  for (const auto& [k, v] : by_glob) s += "@" + k + "=" + v + ",";
  for (const auto& [k, v] : by_op) s += k + "=" + v + ",";
  return s + "*=" + default_backend;
}

int64_t Plan::workspace_bytes() const {
  int64_t n = 0;
  for (const auto& s : steps_) n += static_cast<int64_t>(s.kernel->workspace_bytes());
  return n;
}

int Plan::conversion_count() const {
  int n = 0;
  for (const auto& s : steps_) n += s.conversion;
  return n;
}

int Plan::fallback_count() const {
  int n = 0;
  for (const auto& s : steps_) n += s.fell_back();
  return n;
}

namespace {

/// Greedy best fit: among the slots `is_free` accepts, the smallest that holds `bytes`, else
/// the largest (which grows); a new slot if none is free. Slots have a `bytes` member.
template <class Slot, class Free>
int best_fit(std::vector<Slot>& slots, size_t bytes, Free is_free) {
  int best = -1;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!is_free(slots[i])) continue;
    if (best < 0) {
      best = static_cast<int>(i);
      continue;
    }
    const size_t b = slots[best].bytes, c = slots[i].bytes;
    const bool c_fits = c >= bytes, b_fits = b >= bytes;
    if ((c_fits && (!b_fits || c < b)) || (!c_fits && !b_fits && c > b)) best = static_cast<int>(i);
  }
  if (best < 0) {
    slots.emplace_back();
    best = static_cast<int>(slots.size()) - 1;
  }
  return best;
}

}  // namespace

Expected<std::unique_ptr<Plan>> Plan::build(const Graph& graph, const Placement& placement,
                                            const KernelRegistry& registry, const PlanOptions& options) {
  auto plan = std::make_unique<Plan>();
  Plan& P = *plan;
  P.graph_ = graph;
  P.placement_ = placement;
  P.options_ = options;
  const bool training = options.training;
  Graph& g = P.graph_;
  // Conversion steps append synthetic nodes and values; reserve so references stay valid.
  g.nodes.reserve(g.nodes.size() * 2 + g.outputs.size() + 8);
  P.values_.reserve(g.value_descs.size() * 2 + g.initializers.size() + 8);
  std::map<std::string, int> index;
  auto add_value = [&](const std::string& name) -> int {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    PlanValue v;
    v.name = name;
    auto d = g.value_descs.find(name);
    if (d != g.value_descs.end()) v.desc = d->second;
    auto c = g.initializers.find(name);
    if (c != g.initializers.end()) {
      v.is_const = true;
      v.tensor = c->second;
      // Parameters of a training plan are the plan's own copies, updated in place.
      v.trainable = training && c->second.dtype() == DType::kF32 && !options.frozen.count(name);
      // A training plan owns its float initializers: parameters are updated by optimizers,
      // running statistics by BatchNormalization.
      // The plan's graph refers to the copies too, so the caller's tensors can be released.
      if (training && c->second.dtype() == DType::kF32) {
        v.tensor = c->second.clone();
        c->second = v.tensor;
      }
      P.weight_bytes_ += static_cast<int64_t>(c->second.bytes());
    }
    P.values_.push_back(std::move(v));
    return index[name] = static_cast<int>(P.values_.size()) - 1;
  };
  for (const auto& in : g.inputs) {
    int v = add_value(in.name);
    P.values_[v].is_input = true;
    P.input_values_.push_back(v);
  }
  // Register every value first, and who consumes it (for layout decisions).
  std::map<std::string, std::vector<size_t>> consumers;
  const size_t original_nodes = g.nodes.size();
  for (size_t ni = 0; ni < original_nodes; ++ni) {
    for (const auto& in : g.nodes[ni].inputs)
      if (!in.empty()) {
        add_value(in);
        consumers[in].push_back(ni);
      }
    for (const auto& out : g.nodes[ni].outputs)
      if (!out.empty()) add_value(out);
  }
  std::set<std::string> graph_outputs;
  for (const auto& out : g.outputs) {
    add_value(out.name);
    graph_outputs.insert(out.name);
  }

  // Training: a value needs a gradient if it is a parameter or computed from one.
  if (training) {
    for (size_t ni = 0; ni < original_nodes; ++ni)
      if (const OpSchema* schema = find_schema(g.nodes[ni].op_type))
        for (int i : schema->non_trainable_inputs)
          if (g.nodes[ni].has_input(static_cast<size_t>(i))) P.values_[index.at(g.nodes[ni].inputs[i])].trainable = false;
    for (auto& v : P.values_) v.needs_grad = v.trainable || (options.input_grads && v.is_input);
    for (size_t ni = 0; ni < original_nodes; ++ni) {
      bool any = false;
      for (const auto& in : g.nodes[ni].inputs)
        if (!in.empty()) any = any || P.values_[index.at(in)].needs_grad;
      for (const auto& out : g.nodes[ni].outputs)
        if (!out.empty() && any && P.values_[index.at(out)].desc.dtype == DType::kF32) P.values_[index.at(out)].needs_grad = true;
    }
  }

  // A value may stay in `backend`'s layout if every consumer is a layout-aware op placed on it
  // (in training plans: one whose backward works in layouts too; the value's gradient then
  // shares its layout).
  auto layout_free = [&](const std::string& value, const std::string& backend) {
    if (graph_outputs.count(value) || !consumers.count(value)) return false;
    for (size_t c : consumers[value]) {
      const Node& n = g.nodes[c];
      if (placement.backend_for(n) != backend || !registry.accepts_layouts(backend, n.op_type, training)) return false;
    }
    return true;
  };
  std::map<int, int> plain_copy;  // value in a layout -> its converted plain value
  // Inserts (once per value) a timed step converting `v` to plain; returns the plain value.
  auto to_plain = [&](int v) -> Expected<int> {
    auto it = plain_copy.find(v);
    if (it != plain_copy.end()) return it->second;
    const TensorDesc from = P.values_[v].desc;
    const std::string backend = from.layout->backend();
    Node conv;
    conv.op_type = kToPlainOp;
    conv.name = "to_plain(" + P.values_[v].name + ")";
    conv.inputs = {P.values_[v].name};
    conv.outputs = {P.values_[v].name + "@plain"};
    g.nodes.push_back(conv);
    PlanValue pv;
    pv.name = conv.outputs[0];
    pv.desc = {from.dtype, from.shape, nullptr};
    pv.needs_grad = P.values_[v].needs_grad;  // training: its backward converts the gradient back
    P.values_.push_back(pv);
    const int out = static_cast<int>(P.values_.size()) - 1;
    index[pv.name] = out;
    PlanStep step;
    step.node = static_cast<int>(g.nodes.size()) - 1;
    step.backend = step.requested = backend;
    step.conversion = true;
    KernelContext ctx;
    ctx.node = &g.nodes.back();
    ctx.opset = g.opset;
    ctx.tracker = &P.tracker_;
    ctx.training = training;
    ctx.deterministic = options.deterministic;
    ctx.inputs = {from};
    ctx.input_present = {true};
    ctx.constants = {nullptr};
    ctx.outputs = {pv.desc};
    ctx.output_present = {true};
    const int64_t t0 = now_ns();
    auto k = registry.create(backend, ctx);
    if (!k.ok()) return k.status().with_context(g.source + ": converting '" + P.values_[v].name + "' to plain");
    step.create_ns = now_ns() - t0;
    step.kernel = std::move(k.value());
    step.in = {v};
    step.out = {out};
    step.out_bytes = pv.desc.bytes();
    if (training && pv.needs_grad && !step.kernel->has_backward())
      return Status::unsupported(g.source + ": converting '" + P.values_[v].name + "' to plain has no backward on " +
                                 backend);
    P.steps_.push_back(std::move(step));
    plain_copy[v] = out;
    return out;
  };

  // Create stage: one kernel per node, on the requested backend or the first fallback that can.
  for (size_t ni = 0; ni < original_nodes; ++ni) {
    const Node& node = g.nodes[ni];
    PlanStep step;
    step.node = static_cast<int>(ni);
    step.requested = placement.backend_for(node);
    std::vector<std::string> order{step.requested};
    for (const auto& f : placement.fallback)
      if (std::find(order.begin(), order.end(), f) == order.end()) order.push_back(f);
    std::string reasons;
    for (const auto& backend : order) {
      // Inputs in a layout this kernel cannot read are converted first.
      std::vector<int> in;
      for (const auto& name : node.inputs) {
        int v = name.empty() ? -1 : index.at(name);
        if (v >= 0 && P.values_[v].desc.layout &&
            (P.values_[v].desc.layout->backend() != backend ||
             !registry.accepts_layouts(backend, node.op_type, training))) {
          MOSAIC_ASSIGN_OR_RETURN(v, to_plain(v));
        }
        in.push_back(v);
      }
      KernelContext ctx;
      ctx.node = &g.nodes[ni];
      ctx.opset = g.opset;
      ctx.tracker = &P.tracker_;
      ctx.training = training;
      ctx.deterministic = options.deterministic;
      ctx.seed = options.seed * 1000003u + ni;
      bool grads_flow = false;
      for (int v : in) {
        ctx.inputs.push_back(v < 0 ? TensorDesc{} : P.values_[v].desc);
        ctx.input_present.push_back(v >= 0);
        // Parameters change every step: kernels must not prepack them as constants.
        const bool constant = v >= 0 && P.values_[v].is_const && !P.values_[v].trainable &&
                              !(options.shared_weights && P.values_[v].desc.dtype == DType::kF32);
        ctx.constants.push_back(constant ? &P.values_[v].tensor : nullptr);
        grads_flow = grads_flow || (v >= 0 && P.values_[v].needs_grad);
      }
      std::vector<int> out;
      for (const auto& name : node.outputs) {
        int v = name.empty() ? -1 : index.at(name);
        out.push_back(v);
        ctx.outputs.push_back(v < 0 ? TensorDesc{} : P.values_[v].desc);
        ctx.output_present.push_back(v >= 0);
        ctx.output_layout_free.push_back(v >= 0 && registry.accepts_layouts(backend, node.op_type, training) &&
                                         layout_free(name, backend));
      }
      if (step.flops == 0) step.flops = node_flops(ctx);
      if (training) {
        const std::vector<double> bf = node_backward_flops(ctx);
        step.backward_flops_data = step.backward_flops_weights = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          if (in[i] < 0) continue;
          const PlanValue& v = P.values_[in[i]];
          if (v.trainable) step.backward_flops_weights += bf[i];
          else if (v.needs_grad) step.backward_flops_data += bf[i];
        }
      }
      const int64_t t0 = now_ns();
      auto k = registry.create(backend, ctx);
      if (k.ok() && grads_flow && !k.value()->has_backward())
        k = Status::unsupported("backend '" + backend + "' has no backward for " + node.op_type);
      if (k.ok()) {
        step.create_ns = now_ns() - t0;
        step.kernel = std::move(k.value());
        step.backend = backend;
        step.in = in;
        step.out = out;
        break;
      }
      if (k.status().code() != StatusCode::kUnsupported && k.status().code() != StatusCode::kNotFound)
        return k.status().with_context(g.source + ": " + node.label());
      reasons += (reasons.empty() ? "" : "; ") + k.status().message();
    }
    if (!step.kernel)
      return Status::unsupported(g.source + ": " + node.label() + ": no backend can run it (" + reasons + ")");
    if (step.backend != step.requested) step.fallback_reason = reasons;
    step.alias = step.kernel->aliases_input();
    for (size_t o = 0; o < step.out.size(); ++o) {
      const int v = step.out[o];
      if (v < 0) continue;
      P.values_[v].desc.layout = step.kernel->output_layout(o);
      step.out_bytes += P.values_[v].desc.bytes();
    }
    P.steps_.push_back(std::move(step));
  }
  for (const auto& out : g.outputs) {
    int v = index.at(out.name);
    if (P.values_[v].desc.layout) {
      MOSAIC_ASSIGN_OR_RETURN(v, to_plain(v));
    }
    P.output_values_.push_back(v);
  }

  // Memory planning: liveness per value, greedy best-fit reuse of storage buffers.
  const int nsteps = static_cast<int>(P.steps_.size());
  std::vector<int> last_use(P.values_.size(), -1);
  for (int s = 0; s < nsteps; ++s)
    for (int v : P.steps_[s].in)
      if (v >= 0) last_use[v] = std::max(last_use[v], s);
  for (int v : P.output_values_) last_use[v] = INT_MAX;
  if (training) {
    for (PlanStep& st : P.steps_)
      for (int v : st.in) st.flows = st.flows || (v >= 0 && P.values_[v].needs_grad);
    // Tensors a backward reads are kept until backward; the rest are reused.
    for (int v : P.input_values_) last_use[v] = INT_MAX;
    for (const PlanStep& st : P.steps_) {
      if (!st.flows || st.alias) continue;
      for (size_t i = 0; i < st.in.size(); ++i)
        if (st.in[i] >= 0 && st.kernel->backward_reads_input(i)) last_use[st.in[i]] = INT_MAX;
      for (size_t o = 0; o < st.out.size(); ++o)
        if (st.out[o] >= 0 && st.kernel->backward_reads_output(o)) last_use[st.out[o]] = INT_MAX;
    }
  }
  struct Storage {
    size_t bytes = 0;
    int last_use = -1;
    bool busy = false;
  };
  std::vector<Storage> storage;
  auto acquire = [&](size_t bytes, int until) {
    const int best = best_fit(storage, bytes, [&](const Storage& c) { return !c.busy; });
    storage[best].bytes = std::max(storage[best].bytes, bytes);
    storage[best].busy = true;
    storage[best].last_use = until;
    return best;
  };
  for (int v : P.input_values_) P.values_[v].storage = acquire(P.values_[v].desc.bytes(), std::max(last_use[v], 0));
  for (int s = 0; s < nsteps; ++s) {
    PlanStep& st = P.steps_[s];
    for (size_t o = 0; o < st.out.size(); ++o) {
      int v = st.out[o];
      if (v < 0) continue;
      if (o == 0 && st.alias && st.in[0] >= 0) {
        int src = st.in[0];
        P.values_[v].storage = P.values_[src].storage;
        if (P.values_[v].storage >= 0)
          storage[P.values_[v].storage].last_use = std::max(storage[P.values_[v].storage].last_use, last_use[v]);
        continue;
      }
      P.values_[v].storage = acquire(P.values_[v].desc.bytes(), std::max(last_use[v], s));
    }
    for (auto& sto : storage)
      if (sto.busy && sto.last_use <= s) sto.busy = false;
  }
  for (const auto& sto : storage) {
    P.storage_.push_back(options.allocate ? std::make_shared<Buffer>(sto.bytes, &P.tracker_) : nullptr);
    P.activation_bytes_ += static_cast<int64_t>(sto.bytes);
  }
  // Bind tensors (views for aliases) and the per-step pointer lists.
  for (int v : P.input_values_)
    P.values_[v].tensor = Tensor::on_buffer(P.values_[v].desc, P.storage_[P.values_[v].storage]);
  for (int s = 0; s < nsteps; ++s) {
    PlanStep& st = P.steps_[s];
    for (size_t o = 0; o < st.out.size(); ++o) {
      int v = st.out[o];
      if (v < 0) continue;
      PlanValue& pv = P.values_[v];
      if (o == 0 && st.alias) pv.tensor = P.values_[st.in[0]].tensor.reshaped(pv.desc.shape);
      else pv.tensor = Tensor::on_buffer(pv.desc, P.storage_[pv.storage]);
    }
  }
  for (auto& st : P.steps_) {
    for (int v : st.in) st.src.push_back(v < 0 ? nullptr : &P.values_[v].tensor);
    for (int v : st.out) st.dst.push_back(v < 0 ? nullptr : &P.values_[v].tensor);
  }
  if (training) {
    // A value used by exactly one input slot (and not a graph output) gets its gradient
    // written directly by that consumer; all others are zeroed and accumulated.
    std::vector<int> uses(P.values_.size(), 0);
    for (const auto& st : P.steps_)
      for (int v : st.in)
        if (v >= 0) ++uses[v];
    for (int v : P.output_values_) uses[v] += 2;
    for (auto& st : P.steps_) {
      st.direct.assign(st.in.size(), false);
      for (size_t i = 0; i < st.in.size(); ++i) {
        const int v = st.in[i];
        if (v < 0 || !P.values_[v].needs_grad) continue;
        if (uses[v] == 1 && !st.alias) st.direct[i] = true;
        else P.values_[v].accumulated = true;
      }
    }
    for (int v : P.output_values_) P.values_[v].accumulated = true;

    // Gradient buffers. Parameters, graph inputs and outputs, and values nobody consumes keep
    // their own. An intermediate gradient lives only from the backward of its last consumer to
    // that of its producer, so those share buffers, planned like activations in reverse order.
    std::vector<int> producer(P.values_.size(), -1), last_consumer(P.values_.size(), -1);
    for (int s = 0; s < nsteps; ++s) {
      for (int v : P.steps_[s].out)
        if (v >= 0) producer[v] = s;
      for (int v : P.steps_[s].in)
        if (v >= 0) last_consumer[v] = std::max(last_consumer[v], s);
    }
    std::vector<bool> is_output(P.values_.size(), false);
    for (int v : P.output_values_) is_output[v] = true;
    struct Interval {
      int begin, end, value;  // backward time: step s runs at nsteps - 1 - s
    };
    std::vector<Interval> pooled;
    for (int v = 0; v < static_cast<int>(P.values_.size()); ++v) {
      PlanValue& pv = P.values_[v];
      if (!pv.needs_grad) continue;
      if (pv.is_const || pv.is_input || is_output[v] || producer[v] < 0 || last_consumer[v] < 0) {
        pv.grad = Tensor::empty(pv.desc, &P.tracker_);
        continue;
      }
      pv.grad_pooled = true;
      pooled.push_back({nsteps - 1 - last_consumer[v], nsteps - 1 - producer[v], v});
      if (pv.accumulated) P.steps_[last_consumer[v]].zero_grads.push_back(v);
    }
    std::stable_sort(pooled.begin(), pooled.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
    struct Slot {
      size_t bytes = 0;
      int end = -1;
      std::vector<int> values;
    };
    std::vector<Slot> slots;
    for (const Interval& iv : pooled) {
      const size_t bytes = P.values_[iv.value].desc.bytes();
      const int best = best_fit(slots, bytes, [&](const Slot& c) { return c.end < iv.begin; });
      slots[best].bytes = std::max(slots[best].bytes, bytes);
      slots[best].end = iv.end;
      slots[best].values.push_back(iv.value);
    }
    for (const Slot& slot : slots) {
      auto buffer = std::make_shared<Buffer>(slot.bytes, &P.tracker_);
      for (int v : slot.values) P.values_[v].grad = Tensor::on_buffer(P.values_[v].desc, buffer);
    }

    // Per-input scratch that backward writes before accumulating (one buffer per input slot,
    // sized for the slots that accumulate; views accumulate directly).
    auto scratched = [&](const PlanStep& st, size_t i) {
      return st.in[i] >= 0 && P.values_[st.in[i]].needs_grad && !st.direct[i] && !st.alias;
    };
    std::vector<size_t> scratch_bytes;
    for (const auto& st : P.steps_)
      for (size_t i = 0; i < st.in.size(); ++i)
        if (scratched(st, i)) {
          if (scratch_bytes.size() <= i) scratch_bytes.resize(i + 1, 0);
          scratch_bytes[i] = std::max(scratch_bytes[i], P.values_[st.in[i]].desc.bytes());
        }
    std::vector<std::shared_ptr<Buffer>> pool;
    for (size_t b : scratch_bytes) pool.push_back(b ? std::make_shared<Buffer>(b, &P.tracker_) : nullptr);
    for (auto& st : P.steps_) {
      st.scratch.resize(st.in.size());
      for (size_t i = 0; i < st.in.size(); ++i)
        if (scratched(st, i)) st.scratch[i] = Tensor::on_buffer(P.values_[st.in[i]].desc, pool[i]);
    }
  }
  return plan;
}

std::vector<ParamRef> Plan::parameters() const {
  std::vector<ParamRef> out;
  for (const auto& v : values_)
    if (v.trainable) out.push_back({v.name, v.tensor, v.grad});
  std::sort(out.begin(), out.end(), [](const ParamRef& a, const ParamRef& b) { return a.name < b.name; });
  return out;
}

std::vector<int> Plan::grad_final_step() const {
  std::map<std::string, int> first;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int v : steps_[s].in)
      if (v >= 0 && values_[v].trainable && !first.count(values_[v].name)) first[values_[v].name] = static_cast<int>(s);
  std::vector<int> out;
  for (const auto& p : parameters()) out.push_back(first.count(p.name) ? first[p.name] : -1);
  return out;
}

const Tensor* Plan::input_grad(size_t i) const {
  const PlanValue& v = values_[input_values_.at(i)];
  return v.grad.defined() ? &v.grad : nullptr;
}

namespace {
// Gradients share their value's layout; element-wise sums and zeroing run over the storage
// (a blocked layout's padding is zero in both operands).
void accumulate(Tensor& into, const Tensor& from) {
  float* d = into.f32();
  const float* s = from.f32();
  const int64_t n = static_cast<int64_t>(into.bytes() / sizeof(float));
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}
void zero(Tensor& t) { std::memset(t.data(), 0, t.bytes()); }
}  // namespace

Status Plan::backward(const std::vector<Tensor>& output_grads, ExecObserver* observer, int64_t iteration,
                      BackwardListener* listener) {
  if (!options_.training) return Status::invalid("backward needs a plan built for training");
  if (output_grads.size() != output_values_.size())
    return Status::invalid("expected " + std::to_string(output_values_.size()) + " output gradients");
  for (auto& v : values_)
    if (v.grad.defined() && v.accumulated && !v.grad_pooled) zero(v.grad);
  for (size_t i = 0; i < output_values_.size(); ++i) {
    PlanValue& v = values_[output_values_[i]];
    if (!v.grad.defined()) continue;
    if (output_grads[i].shape() != v.desc.shape)
      return Status::invalid("gradient of output '" + v.name + "' has shape " + shape_str(output_grads[i].shape()));
    accumulate(v.grad, output_grads[i]);
  }
  const int64_t run_begin = observer ? now_ns() : 0;
  for (size_t s = steps_.size(); s-- > 0;) {
    PlanStep& st = steps_[s];
    if (!st.flows) continue;
    for (int v : st.zero_grads) zero(values_[v].grad);
    if (st.alias) {
      accumulate(values_[st.in[0]].grad, values_[st.out[0]].grad);
      if (listener) listener->after_backward_step(static_cast<int>(s));
      continue;
    }
    BackwardArgs args;
    args.src = st.src;
    for (Tensor* t : st.dst) args.dst.push_back(t);
    for (int v : st.out) args.diff_dst.push_back(v >= 0 && values_[v].needs_grad ? &values_[v].grad : nullptr);
    for (size_t i = 0; i < st.in.size(); ++i)
      args.diff_src.push_back(st.direct[i] ? &values_[st.in[i]].grad
                                           : (st.scratch[i].defined() ? &st.scratch[i] : nullptr));
    NodeEvent ev;
    ev.step = static_cast<int>(s);
    ev.stage = Stage::kBackward;
    ev.iteration = iteration;
    if (observer) ev.begin_ns = now_ns();
    Status status = st.kernel->backward(args);
    if (!status.is_ok()) return status.with_context(graph_.nodes[st.node].label() + " backward on " + st.backend);
    for (size_t i = 0; i < st.in.size(); ++i)
      if (st.scratch[i].defined()) accumulate(values_[st.in[i]].grad, st.scratch[i]);
    if (observer) {
      ev.end_ns = now_ns();
      observer->on_node(ev);
    }
    if (listener) listener->after_backward_step(static_cast<int>(s));
  }
  if (observer) observer->on_run({iteration, run_begin, now_ns()});
  return Status::ok();
}

Status Plan::run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs, ExecObserver* observer,
                 int64_t iteration) {
  if (!options_.allocate) return Status::invalid("this plan was built without buffers (PlanOptions::allocate) and cannot run");
  if (inputs.size() != input_values_.size())
    return Status::invalid("expected " + std::to_string(input_values_.size()) + " inputs, got " +
                           std::to_string(inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    PlanValue& v = values_[input_values_[i]];
    if (inputs[i].desc() != v.desc)
      return Status::invalid("input '" + v.name + "' expects " + v.desc.str() + ", got " + inputs[i].desc().str());
    if (v.desc.bytes()) std::memcpy(v.tensor.data(), inputs[i].data(), v.desc.bytes());
  }
  const int64_t run_begin = observer ? now_ns() : 0;
  for (size_t s = 0; s < steps_.size(); ++s) {
    PlanStep& st = steps_[s];
    if (st.alias) continue;
    if (observer) {
      NodeEvent ev;
      ev.step = static_cast<int>(s);
      ev.stage = st.conversion ? Stage::kConversion : Stage::kForward;
      ev.iteration = iteration;
      ev.begin_ns = now_ns();
      Status status = st.kernel->forward(st.src, st.dst);
      ev.end_ns = now_ns();
      if (!status.is_ok()) return status.with_context(graph_.nodes[st.node].label() + " on " + st.backend);
      observer->on_node(ev);
    } else {
      Status status = st.kernel->forward(st.src, st.dst);
      if (!status.is_ok()) return status.with_context(graph_.nodes[st.node].label() + " on " + st.backend);
    }
  }
  if (observer) observer->on_run({iteration, run_begin, now_ns()});
  if (outputs) {
    outputs->clear();
    for (int v : output_values_) outputs->push_back(values_[v].tensor.clone());
  }
  return Status::ok();
}

}  // namespace mosaic
