#include "core/plan.hpp"

#include "core/loss.hpp"
#include "core/optimizer.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fnmatch.h>
#include <map>
#include <optional>
#include <set>
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
    if (key.empty() || key[0] == '@' || !find_schema(key))
      return Status::invalid("unknown op type '" + key + "' (another domain's op by domain and op type: com.example.Op)");
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

std::set<std::string> Placement::asked_backends() const {
  std::set<std::string> asked{default_backend};
  for (const auto& [k, b] : by_op) asked.insert(b);
  for (const auto& [k, b] : by_name) asked.insert(b);
  for (const auto& [k, b] : by_glob) asked.insert(b);
  return asked;
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
  auto o = by_op.find(node.op_key());
  if (o != by_op.end()) return o->second;
  return default_backend;
}

bool Placement::places_explicitly(const Node& node) const {
  if (by_name.count(node.name) || by_op.count(node.op_key())) return true;
  for (const auto& [pattern, backend] : by_glob)
    if (glob_match(pattern, node.name)) return true;
  return false;
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
  for (const auto& s : steps_)
    if (!s.device) n += static_cast<int64_t>(s.kernel->workspace_bytes());
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

const std::string& Plan::parameter_name(const PlanValue& v) const {
  return v.host_mirror >= 0 ? values_[v.host_mirror].name : v.name;
}

std::vector<int> Plan::trainable_values() const {
  std::vector<int> out;
  for (int v = 0; v < static_cast<int>(values_.size()); ++v)
    if (values_[v].trainable) out.push_back(v);
  std::sort(out.begin(), out.end(),
            [&](int a, int b) { return parameter_name(values_[a]) < parameter_name(values_[b]); });
  return out;
}

std::vector<ParamRef> Plan::parameters() const {
  std::vector<ParamRef> out;
  for (int v : trainable_values()) out.push_back({parameter_name(values_[v]), values_[v].tensor, values_[v].grad});
  return out;
}

namespace {
/// The device form of a built-in optimizer (its rule and hyperparameters at step t), or
/// nothing for the others (RMSprop, Adagrad, plugins).
std::optional<OptimizerRule> device_rule(const Optimizer& optimizer, int64_t t) {
  const OptimizerConfig& c = optimizer.config();
  OptimizerRule r;
  r.lr = optimizer.lr();
  r.weight_decay = c.weight_decay;
  r.step = t;
  if (optimizer.name() == "sgd") {
    r.kind = OptimizerRule::kSgd;
    r.momentum = c.momentum;
    r.dampening = c.dampening;
    r.nesterov = c.nesterov;
  } else if (optimizer.name() == "adam" || optimizer.name() == "adamw") {
    r.kind = OptimizerRule::kAdam;
    r.beta1 = c.beta1;
    r.beta2 = c.beta2;
    r.eps = c.eps < 0 ? 1e-8 : c.eps;
    r.decoupled = optimizer.name() == "adamw";
  } else {
    return std::nullopt;
  }
  return r;
}
}  // namespace

std::optional<OptimizerRule> Plan::resident_rule(const Optimizer& optimizer, int64_t t,
                                                 const std::vector<int>& trainable) const {
  std::optional<OptimizerRule> rule = device_rule(optimizer, t);
  bool any = false;
  for (int v : trainable) {
    if (values_[v].host_mirror < 0) continue;
    any = true;
    if (rule && !values_[v].device->optimizer_step(*rule, nullptr, nullptr, nullptr, nullptr, 0).is_ok()) rule.reset();
  }
  if (!any) rule.reset();
  return rule;
}

Expected<std::vector<Tensor>*> Plan::device_optimizer_state(int v, int buffers) {
  const PlanValue& pv = values_[v];
  std::vector<Tensor>& state = device_state_[v];
  while (static_cast<int>(state.size()) < buffers) {
    auto buffer = device_buffer(pv.device, pv.desc.bytes(), nullptr);
    if (!buffer.ok()) return buffer.status().with_context("the optimizer state of '" + parameter_name(pv) + "'");
    state.push_back(Tensor::on_buffer(pv.desc, buffer.value()));
    device_bytes_[pv.device->name()].optimizer_state += static_cast<int64_t>(pv.desc.bytes());
  }
  return &state;
}

Status Plan::optimizer_step(Optimizer& optimizer) {
  const std::vector<int> trainable = trainable_values();
  std::vector<ParamRef> params = parameters();
  std::vector<size_t> resident;
  for (size_t k = 0; k < trainable.size(); ++k)
    if (values_[trainable[k]].host_mirror >= 0) resident.push_back(k);
  if (resident.empty()) return optimizer.step(params);
  // A built-in rule every resident parameter's device computes: the optimizer steps the host
  // parameters, a resident one as an empty range in its place (the optimizer's state stays
  // per position of parameters(), as checkpoints hold it), and the devices the resident ones,
  // with their state there (zeroed when the optimizer starts: a fresh optimizer's first step).
  const bool first = optimizer.steps() == 0;
  if (std::optional<OptimizerRule> rule = resident_rule(optimizer, optimizer.steps() + 1, trainable)) {
    std::vector<float*> host_values(params.size(), nullptr);
    std::vector<const float*> host_grads(params.size(), nullptr);
    std::vector<int64_t> sizes(params.size(), 0);
    for (size_t k = 0; k < params.size(); ++k) {
      if (values_[trainable[k]].host_mirror >= 0) continue;
      if (!params[k].grad.defined() || params[k].grad.numel() != params[k].value.numel())
        return Status::invalid(optimizer.name() + ": parameter '" + params[k].name + "' has no gradient of its size");
      host_values[k] = params[k].value.f32();
      host_grads[k] = params[k].grad.f32();
      sizes[k] = params[k].value.numel();
    }
    MOSAIC_RETURN_IF_ERROR(optimizer.step(host_values, host_grads, sizes));
    for (size_t k : resident) {
      const PlanValue& v = values_[trainable[k]];
      MOSAIC_ASSIGN_OR_RETURN(std::vector<Tensor>* state, device_optimizer_state(trainable[k], rule->buffers()));
      if (first)
        for (Tensor& s : *state) MOSAIC_RETURN_IF_ERROR(v.device->zero(s.data(), s.bytes()));
      float* s0 = rule->buffers() > 0 ? (*state)[0].f32() : nullptr;
      float* s1 = rule->buffers() > 1 ? (*state)[1].f32() : nullptr;
      rule->step = optimizer.steps();
      MOSAIC_RETURN_IF_ERROR(v.device->optimizer_step(*rule, v.tensor.f32(), v.grad.f32(), s0, s1, v.tensor.numel())
                                 .with_context(optimizer.name() + " step of '" + params[k].name + "' on " + v.device->name()));
    }
    return Status::ok();
  }
  // Anything else: through host mirrors, in parameters() order (the optimizer's state is
  // per position).
  for (size_t k : resident) {
    const PlanValue& v = values_[trainable[k]];
    Tensor& host_value = values_[v.host_mirror].tensor;
    Tensor& host_grad = mirror_grads_[trainable[k]];
    if (!host_grad.defined()) host_grad = Tensor::empty(v.desc);
    MOSAIC_RETURN_IF_ERROR(v.device->copy_to_host(host_value.data(), v.tensor.data(), v.tensor.bytes()));
    MOSAIC_RETURN_IF_ERROR(v.device->copy_to_host(host_grad.data(), v.grad.data(), v.grad.bytes()));
    params[k].value = host_value;
    params[k].grad = host_grad;
  }
  MOSAIC_RETURN_IF_ERROR(optimizer.step(params));
  for (size_t k : resident) {
    const PlanValue& v = values_[trainable[k]];
    MOSAIC_RETURN_IF_ERROR(v.device->copy_to_device(v.tensor.data(), values_[v.host_mirror].tensor.data(), v.tensor.bytes()));
  }
  return Status::ok();
}

Expected<std::vector<std::vector<std::vector<float>>>> Plan::optimizer_state(const Optimizer& optimizer) const {
  std::vector<std::vector<std::vector<float>>> state = optimizer.state();
  if (state.empty()) return state;
  const std::vector<int> trainable = trainable_values();
  if (state.size() != trainable.size())
    return Status::invalid(optimizer.name() + ": state for " + std::to_string(state.size()) + " parameters, the plan has " +
                           std::to_string(trainable.size()));
  const size_t buffers = optimizer.state_names().size();
  for (size_t k = 0; k < trainable.size(); ++k) {
    const PlanValue& v = values_[trainable[k]];
    const auto n = static_cast<size_t>(v.desc.numel());
    // A resident parameter optimizer_step updated on its device holds empty buffers here.
    if (v.host_mirror < 0 || n == 0 || (!state[k].empty() && state[k][0].size() == n)) continue;
    auto it = device_state_.find(trainable[k]);
    state[k].clear();
    for (size_t b = 0; b < buffers; ++b) {
      state[k].emplace_back(n, optimizer.initial_state(b));
      if (it != device_state_.end() && b < it->second.size())
        MOSAIC_RETURN_IF_ERROR(v.device->copy_to_host(state[k][b].data(), it->second[b].data(), n * sizeof(float))
                                   .with_context("the optimizer state of '" + parameter_name(v) + "' on " + v.device->name()));
    }
  }
  return state;
}

Status Plan::set_optimizer_state(Optimizer& optimizer, const std::vector<std::vector<std::vector<float>>>& state) {
  const std::vector<int> trainable = trainable_values();
  if (!state.empty() && state.size() != trainable.size())
    return Status::invalid(optimizer.name() + ": state for " + std::to_string(state.size()) + " parameters, the plan has " +
                           std::to_string(trainable.size()));
  optimizer.state() = state;
  const std::optional<OptimizerRule> rule = resident_rule(optimizer, optimizer.steps() + 1, trainable);
  if (state.empty() || !rule) return Status::ok();
  for (size_t k = 0; k < trainable.size(); ++k) {
    const PlanValue& v = values_[trainable[k]];
    if (v.host_mirror < 0) continue;
    const std::string& name = parameter_name(v);
    const auto n = static_cast<size_t>(v.desc.numel());
    if (static_cast<int>(state[k].size()) != rule->buffers())
      return Status::invalid(optimizer.name() + ": parameter '" + name + "' has " + std::to_string(state[k].size()) +
                             " state buffers, the optimizer keeps " + std::to_string(rule->buffers()));
    for (const auto& b : state[k])
      if (b.size() != n)
        return Status::invalid(optimizer.name() + ": a state buffer of parameter '" + name + "' has " +
                               std::to_string(b.size()) + " values, the parameter " + std::to_string(n));
    MOSAIC_ASSIGN_OR_RETURN(std::vector<Tensor>* on_device, device_optimizer_state(trainable[k], rule->buffers()));
    for (int b = 0; b < rule->buffers(); ++b)
      MOSAIC_RETURN_IF_ERROR(v.device->copy_to_device((*on_device)[b].data(), state[k][b].data(), n * sizeof(float))
                                 .with_context("the optimizer state of '" + name + "' to " + v.device->name()));
    // Empty in the optimizer, as optimizer_step leaves a parameter its device updates.
    optimizer.state()[k].assign(static_cast<size_t>(rule->buffers()), std::vector<float>{});
  }
  return Status::ok();
}

Status Plan::bind_parameter_grads(const std::vector<Tensor>& grads) {
  std::vector<PlanValue*> trainable;
  for (int v : trainable_values()) trainable.push_back(&values_[v]);
  for (const PlanValue* v : trainable)
    if (v->device)
      return Status::invalid("bind_parameter_grads: '" + parameter_name(*v) + "' is resident on " + v->device->name() +
                             " (PlanOptions::resident_parameters): its gradient stays in that device's memory");
  if (grads.size() != trainable.size())
    return Status::invalid("bind_parameter_grads: " + std::to_string(grads.size()) + " gradients for " +
                           std::to_string(trainable.size()) + " parameters");
  for (size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined() || grads[i].buffer()->bytes() < trainable[i]->grad.bytes())
      return Status::invalid("bind_parameter_grads: the gradient of '" + trainable[i]->name + "' needs " +
                             std::to_string(trainable[i]->grad.bytes()) + " bytes");
  for (size_t i = 0; i < grads.size(); ++i) {
    std::memcpy(grads[i].data(), trainable[i]->grad.data(), trainable[i]->grad.bytes());
    trainable[i]->grad = Tensor::on_buffer(trainable[i]->grad.desc(), grads[i].buffer());
  }
  return Status::ok();
}

std::vector<int> Plan::grad_final_step() const {
  std::map<std::string, int> first;
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int v : steps_[s].in)
      if (v >= 0 && values_[v].trainable && !first.count(parameter_name(values_[v])))
        first[parameter_name(values_[v])] = static_cast<int>(s);
  std::vector<int> out;
  for (const auto& p : parameters()) out.push_back(first.count(p.name) ? first[p.name] : -1);
  return out;
}

const Tensor* Plan::input_grad(size_t i) const {
  const PlanValue& v = values_[input_values_.at(i)];
  return v.grad.defined() ? &v.grad : nullptr;
}

namespace {
// Gradients share their value's layout and place; element-wise sums and zeroing run over the
// storage (a blocked layout's padding is zero in both operands), by the device where the
// gradient is in a device's memory.
Status accumulate(Tensor& into, const Tensor& from) {
  const int64_t n = static_cast<int64_t>(into.bytes() / sizeof(float));
  if (Device* device = into.device()) return device->accumulate(into.f32(), from.f32(), n);
  float* d = into.f32();
  const float* s = from.f32();
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
  return Status::ok();
}
Status zero(Tensor& t) {
  if (Device* device = t.device()) return device->zero(t.data(), t.bytes());
  std::memset(t.data(), 0, t.bytes());
  return Status::ok();
}
}  // namespace

Status Plan::backward(const std::vector<Tensor>& output_grads, ExecObserver* observer, int64_t iteration,
                      BackwardListener* listener) {
  if (!options_.training) return Status::invalid("backward needs a plan built for training");
  if (output_grads.size() != output_values_.size())
    return Status::invalid("expected " + std::to_string(output_values_.size()) + " output gradients");
  for (size_t i = 0; i < output_values_.size(); ++i)
    if (values_[output_values_[i]].grad.defined() && output_grads[i].shape() != values_[output_values_[i]].desc.shape)
      return Status::invalid("gradient of output '" + values_[output_values_[i]].name + "' has shape " +
                             shape_str(output_grads[i].shape()));
  for (auto& v : values_)
    if (v.grad.defined() && v.accumulated && !v.grad_pooled) MOSAIC_RETURN_IF_ERROR(zero(v.grad));
  for (size_t i = 0; i < output_values_.size(); ++i) {  // graph outputs are on the host
    PlanValue& v = values_[output_values_[i]];
    if (v.grad.defined()) MOSAIC_RETURN_IF_ERROR(accumulate(v.grad, output_grads[i]));
  }
  const int64_t run_begin = observer ? now_ns() : 0;
  for (size_t s = steps_.size(); s-- > 0;) {
    PlanStep& st = steps_[s];
    if (!st.flows) continue;
    for (int v : st.zero_grads) MOSAIC_RETURN_IF_ERROR(zero(values_[v].grad));
    if (st.alias) {
      MOSAIC_RETURN_IF_ERROR(accumulate(values_[st.in[0]].grad, values_[st.out[0]].grad));
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
      if (st.scratch[i].defined()) MOSAIC_RETURN_IF_ERROR(accumulate(values_[st.in[i]].grad, st.scratch[i]));
    if (observer) {
      // A device step's backward is timed on the host around a wait for the device.
      if (st.device) MOSAIC_RETURN_IF_ERROR(st.device->synchronize().with_context(graph_.nodes[st.node].label() + " backward"));
      ev.end_ns = now_ns();
      observer->on_node(ev);
    }
    if (listener) listener->after_backward_step(static_cast<int>(s));
  }
  // Gradients on the host are final (copies out of a device complete before they return);
  // the devices' queued work is waited for before backward returns, as a run's is.
  for (const auto& device : devices_) MOSAIC_RETURN_IF_ERROR(device->synchronize().with_context("backward"));
  if (observer) observer->on_run({iteration, run_begin, now_ns()});
  return Status::ok();
}

Expected<LossValue> Plan::loss(const std::string& name, const Tensor& labels) {
  if (!options_.training) return Status::invalid("loss needs a plan built for training");
  if (output_values_.empty()) return Status::invalid("loss: the plan has no output");
  const PlanValue& out = values_[output_values_[0]];
  Device* device = out.device.get();
  if (!device) {
    if (!loss_grad_.defined()) loss_grad_ = Tensor::empty(out.desc);
    return class_loss(name, out.tensor, labels, &loss_grad_);
  }
  // On the output's device: the labels go there, each row's loss and hit come back.
  int64_t counted = 0;
  MOSAIC_ASSIGN_OR_RETURN(const LossRule rule, loss_rule(name, out.desc.shape, labels, &counted));
  DeviceBytes& held = device_bytes_[device->name()];  // the gradient with the gradients, the rest as workspace
  if (!loss_grad_.defined()) {
    MOSAIC_ASSIGN_OR_RETURN(auto buffer, device_buffer(out.device, out.desc.bytes(), nullptr));
    loss_grad_ = Tensor::on_buffer(out.desc, buffer);
    held.gradients += static_cast<int64_t>(out.desc.bytes());
  }
  const size_t n = static_cast<size_t>(rule.rows);
  for (auto [buffer, bytes] : {std::make_pair(&loss_labels_, n * sizeof(int64_t)), std::make_pair(&loss_rows_, n * sizeof(double)),
                               std::make_pair(&loss_hits_, n * sizeof(int32_t))})
    if (!*buffer || (*buffer)->bytes() < bytes) {
      if (*buffer) held.workspace -= static_cast<int64_t>((*buffer)->bytes());
      MOSAIC_ASSIGN_OR_RETURN(*buffer, device_buffer(out.device, bytes, nullptr));
      held.workspace += static_cast<int64_t>(bytes);
    }
  std::vector<int64_t> ids(static_cast<size_t>(rule.rows));
  for (int64_t i = 0; i < rule.rows; ++i) ids[static_cast<size_t>(i)] = static_cast<int64_t>(labels.get(i));
  MOSAIC_RETURN_IF_ERROR(device->copy_to_device(loss_labels_->data(), ids.data(), ids.size() * sizeof(int64_t)));
  MOSAIC_RETURN_IF_ERROR(device->class_loss(rule, out.tensor.f32(), static_cast<const int64_t*>(loss_labels_->data()),
                                            loss_grad_.f32(), static_cast<double*>(loss_rows_->data()),
                                            static_cast<int32_t*>(loss_hits_->data()))
                             .with_context(name + " on " + device->name()));
  std::vector<double> rows(ids.size());
  std::vector<int32_t> hits(ids.size());
  MOSAIC_RETURN_IF_ERROR(device->copy_to_host(rows.data(), loss_rows_->data(), rows.size() * sizeof(double)));
  MOSAIC_RETURN_IF_ERROR(device->copy_to_host(hits.data(), loss_hits_->data(), hits.size() * sizeof(int32_t)));
  LossValue r;
  for (size_t i = 0; i < rows.size(); ++i) {
    r.loss += rows[i];
    r.correct += hits[i];
  }
  r.loss *= rule.scale;
  r.counted = counted;
  return r;
}

Status Plan::backward_from_loss(ExecObserver* observer, int64_t iteration, BackwardListener* listener) {
  if (!loss_grad_.defined()) return Status::invalid("backward_from_loss: no loss() was taken");
  std::vector<Tensor> seeds{loss_grad_};
  for (size_t i = 1; i < output_values_.size(); ++i) seeds.push_back(Tensor::empty(values_[output_values_[i]].desc));  // zero-filled
  return backward(seeds, observer, iteration, listener);
}

PinnedHost Plan::pin_inputs(const std::vector<Tensor>& inputs) const {
  PinnedHost pinned;
  for (size_t i = 0; i < device_read_inputs_.size() && i < inputs.size(); ++i) {
    if (device_read_inputs_[i].empty() || !inputs[i].bytes() || inputs[i].device()) continue;
    const Device* reader = steps_[device_read_inputs_[i].front().first].device;
    for (const auto& d : devices_)
      if (d.get() == reader && d->pin(inputs[i].data(), inputs[i].bytes())) {
        pinned.pins_.emplace_back(d, inputs[i].data());
        pinned.bytes_ += inputs[i].bytes();
      }
  }
  return pinned;
}

Status Plan::copy_device_state_to_host() {
  for (const ResidentCopy& r : resident_copies_) {
    if (!r.updated) continue;
    const PlanValue& dev = values_[r.device_value];
    Tensor& host = values_[r.host_value].tensor;
    if (dev.tensor.defined() && dev.tensor.bytes())
      MOSAIC_RETURN_IF_ERROR(dev.device->copy_to_host(host.data(), dev.tensor.data(), dev.tensor.bytes())
                                 .with_context("copying '" + values_[r.host_value].name + "' back from " + dev.device->name()));
  }
  return Status::ok();
}

Status Plan::copy_host_state_to_devices() {
  for (const ResidentCopy& r : resident_copies_) {
    const PlanValue& dev = values_[r.device_value];
    const Tensor& host = values_[r.host_value].tensor;
    if (dev.tensor.defined() && dev.tensor.bytes())
      MOSAIC_RETURN_IF_ERROR(dev.device->copy_to_device(dev.tensor.data(), host.data(), dev.tensor.bytes())
                                 .with_context("copying '" + values_[r.host_value].name + "' to " + dev.device->name()));
  }
  return Status::ok();
}

PinnedHost Plan::pin_parameters() const {
  PinnedHost pinned;
  std::set<const void*> seen;
  for (const PlanStep& st : steps_) {
    if (!st.conversion || !st.device || st.in.empty() || st.in[0] < 0) continue;
    const PlanValue& v = values_[st.in[0]];
    if (!v.trainable || v.device) continue;  // a host parameter copied to st.device
    for (const Tensor* t : {&v.tensor, &v.grad}) {
      if (!t->defined() || !t->bytes() || t->device() || !seen.insert(t->data()).second) continue;
      for (const auto& d : devices_)
        if (d.get() == st.device && d->pin(t->data(), t->bytes())) {
          pinned.pins_.emplace_back(d, t->data());
          pinned.bytes_ += t->bytes();
        }
    }
  }
  return pinned;
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
    const bool borrowed = i < device_read_inputs_.size() && !device_read_inputs_[i].empty();
    if (v.desc.bytes() && !borrowed) std::memcpy(v.tensor.data(), inputs[i].data(), v.desc.bytes());
  }
  // Inputs only copies to a device read: those copies read the caller's tensor for this run
  // (no host copy of the batch first), and the plan's own again after it.
  struct Borrow {
    Plan& plan;
    const std::vector<Tensor>& inputs;
    void point(bool at_caller) {
      for (size_t i = 0; i < plan.device_read_inputs_.size() && i < inputs.size(); ++i)
        for (const auto& [step, slot] : plan.device_read_inputs_[i])
          plan.steps_[step].src[slot] = at_caller ? &inputs[i] : &plan.values_[plan.input_values_[i]].tensor;
    }
    ~Borrow() { point(false); }
  } borrow{*this, inputs};
  borrow.point(true);
  const int64_t run_begin = observer ? now_ns() : 0;
  // A timed run times each device step on its device where the device can (Device::timing):
  // markers 2s and 2s + 1 around step s, reported once the device has finished. Per device:
  // its first marker, and the host's clock when it was queued (where its steps are placed
  // on the host's timeline).
  struct DeviceClock {
    size_t first = SIZE_MAX;
    int64_t host_ns = 0;
  };
  std::map<Device*, DeviceClock> device_clocks;
  std::vector<size_t> device_timed;  // steps timed by markers, in order
  if (observer)
    for (const auto& d : devices_)
      if (d->timing(2 * steps_.size())) device_clocks[d.get()];
  for (size_t s = 0; s < steps_.size(); ++s) {
    PlanStep& st = steps_[s];
    if (st.alias) continue;
    if (observer && st.device && device_clocks.count(st.device)) {
      DeviceClock& clock = device_clocks[st.device];
      if (clock.first == SIZE_MAX) {
        clock.first = 2 * s;
        clock.host_ns = now_ns();
      }
      Status status = st.device->mark(2 * s);
      if (status.is_ok()) status = st.kernel->forward(st.src, st.dst);
      if (status.is_ok()) status = st.device->mark(2 * s + 1);
      if (!status.is_ok()) return status.with_context(graph_.nodes[st.node].label() + " on " + st.backend);
      device_timed.push_back(s);
    } else if (observer) {
      NodeEvent ev;
      ev.step = static_cast<int>(s);
      ev.stage = st.conversion ? Stage::kConversion : Stage::kForward;
      ev.iteration = iteration;
      ev.begin_ns = now_ns();
      Status status = st.kernel->forward(st.src, st.dst);
      // A device's kernels may return before it has finished: its step ends when it has.
      if (status.is_ok() && st.device) status = st.device->synchronize();
      ev.end_ns = now_ns();
      if (!status.is_ok()) return status.with_context(graph_.nodes[st.node].label() + " on " + st.backend);
      observer->on_node(ev);
    } else {
      Status status = st.kernel->forward(st.src, st.dst);
      if (!status.is_ok()) return status.with_context(graph_.nodes[st.node].label() + " on " + st.backend);
    }
  }
  for (const auto& d : devices_)  // the run ends when every device has finished its work
    if (Status st = d->synchronize(); !st.is_ok()) return st.with_context("waiting for " + d->name());
  const int64_t run_end = observer ? now_ns() : 0;
  for (size_t s : device_timed) {
    const PlanStep& st = steps_[s];
    const DeviceClock& clock = device_clocks[st.device];
    auto from_first = st.device->elapsed_ns(clock.first, 2 * s);
    auto duration = st.device->elapsed_ns(2 * s, 2 * s + 1);
    if (!from_first.ok() || !duration.ok())
      return (from_first.ok() ? duration.status() : from_first.status())
          .with_context(graph_.nodes[st.node].label() + " on " + st.backend + ": reading its device time");
    NodeEvent ev;
    ev.step = static_cast<int>(s);
    ev.stage = st.conversion ? Stage::kConversion : Stage::kForward;
    ev.iteration = iteration;
    ev.begin_ns = clock.host_ns + from_first.value();
    ev.end_ns = ev.begin_ns + duration.value();
    observer->on_node(ev);
  }
  if (observer) observer->on_run({iteration, run_begin, run_end});
  if (outputs) {
    outputs->clear();
    for (int v : output_values_) outputs->push_back(values_[v].tensor.clone());
  }
  return Status::ok();
}

}  // namespace mosaic
