// Plan::build as named passes over one builder: register the values, mark what needs a
// gradient, create a kernel per node (with conversions out of backend layouts and
// fallbacks), convert the graph outputs to plain, plan activation memory, bind tensors,
// and in training plan the gradient buffers and backward scratch.
#include <algorithm>
#include <climits>
#include <map>
#include <set>

#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/run_time_shape.hpp"
#include "operators/schema.hpp"

namespace mosaic {

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

/// The kernel of a mosaic.ToDevice / mosaic.ToHost step: its input's bytes, copied across.
class DeviceCopyKernel : public Kernel {
 public:
  DeviceCopyKernel(std::shared_ptr<Device> device, bool to_device) : device_(std::move(device)), to_device_(to_device) {}
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t bytes = src[0]->bytes();
    if (!bytes) return Status::ok();
    return to_device_ ? device_->copy_to_device(dst[0]->data(), src[0]->data(), bytes)
                      : device_->copy_to_host(dst[0]->data(), src[0]->data(), bytes);
  }
  /// The gradient goes back the other way: a copy to the device brings its output's gradient
  /// to the host, a copy to the host takes its output's gradient to the device.
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0] || !a.diff_dst[0]) return Status::ok();
    const size_t bytes = a.diff_src[0]->bytes();
    if (!bytes) return Status::ok();
    return to_device_ ? device_->copy_to_host(a.diff_src[0]->data(), a.diff_dst[0]->data(), bytes)
                      : device_->copy_to_device(a.diff_src[0]->data(), a.diff_dst[0]->data(), bytes);
  }

 private:
  std::shared_ptr<Device> device_;
  bool to_device_;
};

}  // namespace

class PlanBuilder {
 public:
  PlanBuilder(Plan& plan, const Placement& placement, const KernelRegistry& registry, const PlanOptions& options)
      : P(plan), g(plan.graph_), placement_(placement), registry_(registry), options_(options),
        training_(options.training), original_nodes_(plan.graph_.nodes.size()) {
    // Conversion steps append synthetic nodes and values; reserve so references stay valid.
    g.nodes.reserve(g.nodes.size() * 2 + g.outputs.size() + 8);
    P.values_.reserve(g.value_descs.size() * 2 + g.initializers.size() + 8);
  }

  /// Every value of the graph, and who consumes it (for layout decisions).
  void register_values() {
    for (const auto& in : g.inputs) {
      int v = add_value(in.name);
      P.values_[v].is_input = true;
      P.input_values_.push_back(v);
    }
    for (size_t ni = 0; ni < original_nodes_; ++ni) {
      for (const auto& in : g.nodes[ni].inputs)
        if (!in.empty()) {
          add_value(in);
          consumers_[in].push_back(ni);
        }
      for (const auto& out : g.nodes[ni].outputs)
        if (!out.empty()) add_value(out);
    }
    for (const auto& out : g.outputs) {
      add_value(out.name);
      graph_outputs_.insert(out.name);
    }
  }

  /// Training: a value needs a gradient if it is a parameter or computed from one.
  void mark_gradients() {
    if (!training_) return;
    for (size_t ni = 0; ni < original_nodes_; ++ni)
      if (const OpSchema* schema = find_schema(g.nodes[ni].op_key()))
        for (int i : schema->non_trainable_inputs)
          if (g.nodes[ni].has_input(static_cast<size_t>(i))) P.values_[index_.at(g.nodes[ni].inputs[i])].trainable = false;
    // Integer inputs (token ids) have no gradient, and nodes that only read them need no backward.
    for (auto& v : P.values_)
      v.needs_grad = v.trainable || (options_.input_grads && v.is_input && v.desc.dtype == DType::kF32);
    for (size_t ni = 0; ni < original_nodes_; ++ni) {
      bool any = false;
      for (const auto& in : g.nodes[ni].inputs)
        if (!in.empty()) any = any || P.values_[index_.at(in)].needs_grad;
      for (const auto& out : g.nodes[ni].outputs)
        if (!out.empty() && any && P.values_[index_.at(out)].desc.dtype == DType::kF32)
          P.values_[index_.at(out)].needs_grad = true;
    }
  }

  /// Create stage: one kernel per node, on the requested backend or the first fallback that
  /// can; then the graph outputs, converted to plain where a kernel left them in a layout.
  Status create_kernels() {
    for (size_t ni = 0; ni < original_nodes_; ++ni) MOSAIC_RETURN_IF_ERROR(create_step(ni));
    for (const auto& out : g.outputs) {
      int v = index_.at(out.name);
      if (P.values_[v].desc.layout) {
        MOSAIC_ASSIGN_OR_RETURN(v, to_plain(v));
      }
      if (!loss_stays_on_device(v)) {
        MOSAIC_ASSIGN_OR_RETURN(v, move_to(v, nullptr));
      }
      P.output_values_.push_back(v);
    }
    return Status::ok();
  }

  /// PlanOptions::loss_on_device: the one output of a training plan, computed on a device
  /// that computes the losses, stays there.
  bool loss_stays_on_device(int v) const {
    const PlanValue& pv = P.values_[v];
    return training_ && options_.loss_on_device && g.outputs.size() == 1 && pv.device && pv.desc.dtype == DType::kF32 &&
           pv.device->trains() && pv.device->class_loss(LossRule{}, nullptr, nullptr, nullptr, nullptr, nullptr).is_ok();
  }

  /// PlanOptions::resident_parameters: a parameter whose one reader is its copy to a device
  /// (every kernel reading it computes there) becomes that device's value, copied there once
  /// now; the copy step goes, and with it the per-step copies of the value and its gradient.
  /// The host value stays as its mirror (its name; optimizer_step's copy path).
  Status make_parameters_resident() {
    if (!training_ || !options_.resident_parameters) return Status::ok();
    std::vector<int> readers(P.values_.size(), 0);
    for (const auto& st : P.steps_)
      for (int v : st.in)
        if (v >= 0) ++readers[v];
    for (int v : P.output_values_) readers[v] += 2;  // a graph output is read on the host
    std::vector<PlanStep> kept;
    for (PlanStep& st : P.steps_) {
      const int in = st.conversion && st.in.size() == 1 ? st.in[0] : -1;
      const int out = in >= 0 && st.out.size() == 1 ? st.out[0] : -1;
      if (out < 0 || !P.values_[in].trainable || P.values_[in].device || !P.values_[out].device || readers[in] != 1 ||
          !P.values_[out].device->trains()) {
        kept.push_back(std::move(st));
        continue;
      }
      PlanValue& host = P.values_[in];
      PlanValue& dev = P.values_[out];
      const size_t bytes = dev.desc.bytes();
      if (options_.allocate) {
        auto buffer = device_buffer(dev.device, bytes, nullptr);
        if (!buffer.ok()) return buffer.status().with_context(g.source + ": parameter '" + host.name + "' on " + dev.device->name());
        dev.tensor = Tensor::on_buffer(dev.desc, buffer.value());
        if (bytes)
          MOSAIC_RETURN_IF_ERROR(dev.device->copy_to_device(dev.tensor.data(), host.tensor.data(), bytes)
                                     .with_context(g.source + ": copying parameter '" + host.name + "' to " + dev.device->name()));
      }
      P.device_bytes_[dev.device->name()].parameters += static_cast<int64_t>(bytes);
      dev.is_const = dev.trainable = dev.needs_grad = true;
      dev.host_mirror = in;
      host.trainable = host.needs_grad = false;
      resident_of_[out] = in;  // copy_device_state_to_host brings it back
    }
    P.steps_ = std::move(kept);
    return Status::ok();
  }

  /// Plan::resident_copies_: every resident copy of a constant or parameter, and whether the
  /// device changes it (a kernel updating it in place, Kernel::updates_input; a resident
  /// parameter's optimizer step).
  void note_resident_copies() {
    std::set<int> updated;
    for (const PlanStep& st : P.steps_)
      for (size_t i = 0; i < st.in.size(); ++i)
        if (st.in[i] >= 0 && st.kernel->updates_input(i)) updated.insert(st.in[i]);
    for (const auto& [device_value, host_value] : resident_of_)
      P.resident_copies_.push_back(
          {device_value, host_value, updated.count(device_value) > 0 || P.values_[device_value].trainable});
  }

  /// The most bytes of attention-score values live at one step, from each value's liveness
  /// (produced at its step, alive until its last use).
  void attention_peak(const std::vector<int>& last_use) {
    const std::set<std::string> scores = attention_scores(g);
    if (scores.empty()) return;
    struct Span {
      int born, last;
      int64_t bytes;
    };
    std::vector<Span> spans;
    for (int s = 0; s < static_cast<int>(P.steps_.size()); ++s)
      for (int v : P.steps_[s].out)
        if (v >= 0 && scores.count(P.values_[v].name))
          spans.push_back({s, std::max(last_use[v], s), static_cast<int64_t>(P.values_[v].desc.bytes())});
    for (const Span& at : spans) {  // the peak is at some value's birth
      int64_t live = 0;
      for (const Span& o : spans)
        if (o.born <= at.born && o.last >= at.born) live += o.bytes;
      P.attention_bytes_ = std::max(P.attention_bytes_, live);
    }
  }

  /// Memory planning: liveness per value, greedy best-fit reuse of storage buffers (each
  /// device's values in buffers of their own device, counted in device_bytes_, not in the
  /// host's tracker).
  Status plan_activations() {
    const int nsteps = static_cast<int>(P.steps_.size());
    std::vector<int> last_use(P.values_.size(), -1);
    for (int s = 0; s < nsteps; ++s)
      for (int v : P.steps_[s].in)
        if (v >= 0) last_use[v] = std::max(last_use[v], s);
    for (int v : P.output_values_) last_use[v] = INT_MAX;
    if (training_) {
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
    attention_peak(last_use);
    struct Storage {
      size_t bytes = 0;
      int last_use = -1;
      bool busy = false;
      std::shared_ptr<Device> device;
    };
    std::vector<Storage> storage;
    auto acquire = [&](const PlanValue& v, int until) {
      const int best = best_fit(storage, v.desc.bytes(), [&](const Storage& c) { return !c.busy && c.device == v.device; });
      Storage& slot = storage[best];
      slot.device = v.device;  // a reused slot is on it already, a new one takes it
      slot.bytes = std::max(slot.bytes, v.desc.bytes());
      slot.busy = true;
      slot.last_use = until;
      return best;
    };
    // An input only copies to a device read needs no host buffer: run() copies it to the
    // device from the caller's tensor (find_device_read_inputs).
    for (size_t i = 0; i < P.input_values_.size(); ++i) {
      const int v = P.input_values_[i];
      if (i < P.device_read_inputs_.size() && !P.device_read_inputs_[i].empty()) continue;
      P.values_[v].storage = acquire(P.values_[v], std::max(last_use[v], 0));
    }
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
        P.values_[v].storage = acquire(P.values_[v], std::max(last_use[v], s));
      }
      for (auto& sto : storage)
        if (sto.busy && sto.last_use <= s) sto.busy = false;
    }
    for (size_t i = 0; i < storage.size(); ++i) {
      const Storage& sto = storage[i];
      if (!sto.device) {
        P.storage_.push_back(options_.allocate ? std::make_shared<Buffer>(sto.bytes, &P.tracker_) : nullptr);
        P.activation_bytes_ += static_cast<int64_t>(sto.bytes);
        continue;
      }
      P.device_bytes_[sto.device->name()].activations += static_cast<int64_t>(sto.bytes);
      if (!options_.allocate) {
        P.storage_.push_back(nullptr);
        continue;
      }
      auto buffer = device_buffer(sto.device, sto.bytes, nullptr);
      if (!buffer.ok()) {
        std::vector<int> users;
        for (size_t v = 0; v < P.values_.size(); ++v)
          if (P.values_[v].storage == static_cast<int>(i)) users.push_back(static_cast<int>(v));
        return buffer.status().with_context(g.source + ": activation buffer of " + std::to_string(sto.bytes) + " bytes on " +
                                            sto.device->name() + " for " + values_label(users));
      }
      P.storage_.push_back(std::move(buffer.value()));
    }
    return Status::ok();
  }

  /// Binds tensors to the planned buffers (views for aliases) and the per-step pointer lists.
  void bind_tensors() {
    for (int v : P.input_values_)  // no buffer (storage -1): an input only a device's copy reads
      P.values_[v].tensor = Tensor::on_buffer(P.values_[v].desc, P.values_[v].storage >= 0 ? P.storage_[P.values_[v].storage] : nullptr);
    for (PlanStep& st : P.steps_) {
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
  }

  /// Each device's kernels' workspaces, in device_bytes_.
  void count_device_workspaces() {
    for (const PlanStep& st : P.steps_)
      if (st.device) P.device_bytes_[st.device->name()].workspace += static_cast<int64_t>(st.kernel->workspace_bytes());
  }

  /// Plan::device_read_inputs_: the inputs that only copies to a device read (and that are
  /// not outputs), with those copies' slots. Training plans too: a copy's backward takes the
  /// gradient back without reading the input, so nothing reads its host value after run().
  void find_device_read_inputs() {
    P.device_read_inputs_.assign(P.input_values_.size(), {});
    for (size_t i = 0; i < P.input_values_.size(); ++i) {
      const int v = P.input_values_[i];
      if (std::find(P.output_values_.begin(), P.output_values_.end(), v) != P.output_values_.end()) continue;
      std::vector<std::pair<size_t, size_t>> readers;
      bool only_copies = true;
      for (size_t s = 0; s < P.steps_.size() && only_copies; ++s)
        for (size_t k = 0; k < P.steps_[s].in.size(); ++k) {
          if (P.steps_[s].in[k] != v) continue;
          if (g.nodes[P.steps_[s].node].op_type != kToDeviceOp) {
            only_copies = false;
            break;
          }
          readers.emplace_back(s, k);
        }
      if (only_copies) P.device_read_inputs_[i] = std::move(readers);
    }
  }

  /// Training: which gradients are written directly and which accumulate, the gradient
  /// buffers, and the scratch backward writes before accumulating.
  Status plan_gradients() {
    if (!training_) return Status::ok();
    mark_direct_gradients();
    MOSAIC_RETURN_IF_ERROR(plan_gradient_buffers());
    return plan_backward_scratch();
  }

 private:
  int add_value(const std::string& name) {
    auto it = index_.find(name);
    if (it != index_.end()) return it->second;
    PlanValue v;
    v.name = name;
    auto d = g.value_descs.find(name);
    if (d != g.value_descs.end()) v.desc = d->second;
    auto c = g.initializers.find(name);
    if (c != g.initializers.end()) {
      v.is_const = true;
      v.tensor = c->second;
      // Parameters of a training plan are the plan's own copies, updated in place.
      v.trainable = training_ && c->second.dtype() == DType::kF32 && !options_.frozen.count(name) && !g.constants.count(name);
      // A training plan owns its float initializers: parameters are updated by optimizers,
      // running statistics by BatchNormalization.
      // The plan's graph refers to the copies too, so the caller's tensors can be released.
      if (training_ && c->second.dtype() == DType::kF32) {
        v.tensor = c->second.clone();
        c->second = v.tensor;
      }
      P.weight_bytes_ += static_cast<int64_t>(c->second.bytes());
    }
    P.values_.push_back(std::move(v));
    return index_[name] = static_cast<int>(P.values_.size()) - 1;
  }

  /// A value may stay in `backend`'s layout if every consumer is placed on it and the
  /// backend's capability query takes that node in its layouts (in training plans: in
  /// training too; the value's gradient then shares its layout). A consumer the backend
  /// would decline falls back elsewhere, so its input stays plain.
  bool layout_free(const std::string& value, const std::string& backend) const {
    if (graph_outputs_.count(value) || !consumers_.count(value)) return false;
    for (size_t c : consumers_.at(value)) {
      if (placement_.backend_for(g.nodes[c]) != backend) return false;
      std::vector<int> in;
      for (const auto& name : g.nodes[c].inputs) in.push_back(name.empty() ? -1 : index_.at(name));
      if (!registry_.query(backend, node_context(c, in)).layouts) return false;
    }
    return true;
  }

  /// Node `ni`'s context with inputs `in` (value indices, -1 where omitted): descriptors,
  /// constants (parameters change every step, so kernels must not prepack them) and outputs.
  KernelContext node_context(size_t ni, const std::vector<int>& in) const {
    KernelContext ctx = base_context(&g.nodes[ni]);
    ctx.seed = options_.seed * 1000003u + ni;
    for (int v : in) {
      ctx.inputs.push_back(v < 0 ? TensorDesc{} : P.values_[v].desc);
      ctx.input_present.push_back(v >= 0);
      const int host = v >= 0 && resident_of_.count(v) ? resident_of_.at(v) : v;
      const bool constant = host >= 0 && is_constant(host);
      ctx.constants.push_back(constant ? &P.values_[host].tensor : nullptr);
    }
    for (const auto& name : g.nodes[ni].outputs) {
      const int v = name.empty() ? -1 : index_.at(name);
      ctx.outputs.push_back(v < 0 ? TensorDesc{} : P.values_[v].desc);
      ctx.output_present.push_back(v >= 0);
    }
    return ctx;
  }

  KernelContext base_context(const Node* node) const {
    KernelContext ctx;
    ctx.node = node;
    ctx.opset = g.opset;
    ctx.tracker = &P.tracker_;
    ctx.training = training_;
    ctx.deterministic = options_.deterministic;
    ctx.precision = options_.precision;
    return ctx;
  }

  /// Inserts (once per value) a timed step converting `v` to plain; returns the plain value.
  Expected<int> to_plain(int v) {
    auto it = plain_copy_.find(v);
    if (it != plain_copy_.end()) return it->second;
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
    pv.device = P.values_[v].device;
    P.values_.push_back(pv);
    const int out = static_cast<int>(P.values_.size()) - 1;
    index_[pv.name] = out;
    PlanStep step;
    step.node = static_cast<int>(g.nodes.size()) - 1;
    step.backend = step.requested = backend;
    step.conversion = true;
    step.device = pv.device.get();
    KernelContext ctx = base_context(&g.nodes.back());
    ctx.inputs = {from};
    ctx.input_present = {true};
    ctx.constants = {nullptr};
    ctx.outputs = {pv.desc};
    ctx.output_present = {true};
    const int64_t t0 = now_ns();
    auto k = registry_.create(backend, ctx);
    if (!k.ok()) return k.status().with_context(g.source + ": converting '" + P.values_[v].name + "' to plain");
    step.create_ns = now_ns() - t0;
    step.kernel = std::move(k.value());
    step.in = {v};
    step.out = {out};
    step.out_bytes = pv.desc.bytes();
    if (training_ && pv.needs_grad && !step.kernel->has_backward())
      return Status::unsupported(g.source + ": converting '" + P.values_[v].name + "' to plain has no backward on " +
                                 backend);
    P.steps_.push_back(std::move(step));
    plain_copy_[v] = out;
    return out;
  }

  /// A constant kernels may prepack: not a parameter, and not a weight another plan shares.
  bool is_constant(int v) const {
    const PlanValue& pv = P.values_[v];
    return pv.is_const && !pv.trainable && !(options_.shared_weights && pv.desc.dtype == DType::kF32);
  }

  std::shared_ptr<Device> device_of(const std::string& backend) const {
    const BackendInfo* info = registry_.info(backend);
    return info ? info->device : nullptr;
  }

  /// Value `v` where `device`'s kernels (nullptr: the host's) can read it: itself if it is
  /// there; a resident copy made now for a constant going to a device; else the output of a
  /// copy step (through the host between two devices). Once per value and place.
  Expected<int> move_to(int v, const std::shared_ptr<Device>& device) {
    if (P.values_[v].device == device) return v;
    const auto key = std::make_pair(v, device.get());
    if (auto it = moved_.find(key); it != moved_.end()) return it->second;
    int out = v;
    if (P.values_[v].device) {
      MOSAIC_ASSIGN_OR_RETURN(out, copy_step(v, P.values_[v].device, false));
    }
    if (device) {
      if (is_constant(out)) {
        MOSAIC_ASSIGN_OR_RETURN(out, resident_copy(out, device));
      } else {
        MOSAIC_ASSIGN_OR_RETURN(out, copy_step(out, device, true));
      }
    }
    return moved_[key] = out;
  }

  /// A constant's copy in `device`'s memory, made once at build time: the kernels there read
  /// it on every run without a copy step.
  Expected<int> resident_copy(int v, const std::shared_ptr<Device>& device) {
    PlanValue pv;
    pv.name = P.values_[v].name + "@" + device->name();
    pv.desc = P.values_[v].desc;
    pv.is_const = true;
    pv.device = device;
    const size_t bytes = pv.desc.bytes();
    if (options_.allocate) {
      auto buffer = device_buffer(device, bytes, nullptr);
      if (!buffer.ok()) return buffer.status().with_context(g.source + ": resident copy of '" + P.values_[v].name + "'");
      pv.tensor = Tensor::on_buffer(pv.desc, buffer.value());
      if (bytes) {
        MOSAIC_RETURN_IF_ERROR(device->copy_to_device(pv.tensor.data(), P.values_[v].tensor.data(), bytes)
                                   .with_context(g.source + ": copying '" + P.values_[v].name + "' to " + device->name()));
      }
    }
    P.device_bytes_[device->name()].constants += static_cast<int64_t>(bytes);
    P.values_.push_back(std::move(pv));
    const int out = static_cast<int>(P.values_.size()) - 1;
    index_[P.values_[out].name] = out;
    resident_of_[out] = v;
    return out;
  }

  /// Inserts a timed step copying plain value `v` to `device` (to_device) or out of it to the
  /// host; returns the copy. It runs as a conversion of the backend that computes there.
  Expected<int> copy_step(int v, const std::shared_ptr<Device>& device, bool to_device) {
    const std::string& name = P.values_[v].name;
    if (P.values_[v].desc.layout)
      return Status::internal(g.source + ": '" + name + "' is copied between devices while in a layout");
    Node copy;
    copy.op_type = to_device ? kToDeviceOp : kToHostOp;
    copy.name = std::string(to_device ? "to_device(" : "to_host(") + name + ")";
    copy.inputs = {name};
    copy.outputs = {name + "@" + (to_device ? device->name() : std::string("host"))};
    g.nodes.push_back(copy);
    PlanValue pv;
    pv.name = copy.outputs[0];
    pv.desc = P.values_[v].desc;
    pv.device = to_device ? device : nullptr;
    pv.needs_grad = P.values_[v].needs_grad;  // training: the copy's backward brings the gradient back
    P.values_.push_back(pv);
    const int out = static_cast<int>(P.values_.size()) - 1;
    index_[pv.name] = out;
    PlanStep step;
    step.node = static_cast<int>(g.nodes.size()) - 1;
    step.backend = step.requested = device_backend_.at(device.get());
    step.conversion = true;
    step.device = device.get();
    step.kernel = std::make_unique<DeviceCopyKernel>(device, to_device);
    step.in = {v};
    step.out = {out};
    step.out_bytes = pv.desc.bytes();
    P.steps_.push_back(std::move(step));
    return out;
  }

  /// Node `ni`'s kernel on `backend`, which its capability query `cap` accepted: inputs in a
  /// layout the kernel cannot read are converted to plain first, the step's FLOPs counted
  /// from the context, and a kernel without the backward a training plan needs declined. A
  /// kernel that declines an input in the backend's own layout (oneDNN's training max pool
  /// reads channel blocks only, and bf16 convolutions on AMX leave others) is asked again with
  /// those inputs converted to plain before the node moves to another backend. IN and OUT are
  /// the value indices it reads and writes; T0 when the successful creation began.
  Expected<std::unique_ptr<Kernel>> create_kernel(size_t ni, const std::string& backend, const Capability& cap,
                                                  bool run_time_shape, std::vector<int>& in, std::vector<int>& out,
                                                  PlanStep& step, int64_t& t0) {
    const Node& node = g.nodes[ni];
    for (int& v : in)
      if (v >= 0 && P.values_[v].desc.layout && (P.values_[v].desc.layout->backend() != backend || !cap.layouts)) {
        MOSAIC_ASSIGN_OR_RETURN(v, to_plain(v));
      }
    auto attempt = [&]() -> Expected<std::unique_ptr<Kernel>> {
      KernelContext ctx = node_context(ni, in);
      bool grads_flow = false;
      for (int v : in) grads_flow = grads_flow || (v >= 0 && P.values_[v].needs_grad);
      out.clear();
      for (const auto& name : node.outputs) {
        const int v = name.empty() ? -1 : index_.at(name);
        out.push_back(v);
        ctx.output_layout_free.push_back(v >= 0 && cap.layouts && layout_free(name, backend));
      }
      if (step.flops == 0) step.flops = node_flops(ctx);
      if (training_) {
        const std::vector<double> bf = node_backward_flops(ctx);
        step.backward_flops_data = step.backward_flops_weights = 0;
        for (size_t i = 0; i < in.size(); ++i) {
          if (in[i] < 0) continue;
          const PlanValue& v = P.values_[in[i]];
          if (v.trainable) step.backward_flops_weights += bf[i];
          else if (v.needs_grad) step.backward_flops_data += bf[i];
        }
      }
      t0 = now_ns();
      auto k = run_time_shape ? make_run_time_shape_kernel(ctx, registry_, backend) : registry_.create(backend, ctx);
      if (k.ok() && grads_flow && !k.value()->has_backward())
        k = Status::unsupported("backend '" + backend + "' has no backward for " + node.op_type);
      return k;
    };
    auto k = attempt();
    if (k.ok() || k.status().code() != StatusCode::kUnsupported) return k;
    bool in_layout = false;
    for (int v : in) in_layout = in_layout || (v >= 0 && P.values_[v].desc.layout);
    if (!in_layout) return k;
    for (int& v : in)
      if (v >= 0 && P.values_[v].desc.layout) {
        MOSAIC_ASSIGN_OR_RETURN(v, to_plain(v));
      }
    auto plain = attempt();
    return plain.ok() ? std::move(plain) : std::move(k);
  }

  /// The step of node `ni`: its requested backend, else the placement's fallbacks in order.
  /// A decline (unsupported, no kernel) tries the next; any other error stops the build.
  Status create_step(size_t ni) {
    const Node& node = g.nodes[ni];
    PlanStep step;
    step.node = static_cast<int>(ni);
    step.requested = placement_.backend_for(node);
    std::vector<std::string> order{step.requested};
    for (const auto& f : placement_.fallback)
      if (std::find(order.begin(), order.end(), f) == order.end()) order.push_back(f);
    std::string reasons;
    // A node planned from input values (core/run_time_shape.hpp) is evaluated by the oracle.
    const bool run_time_shape = has_run_time_shape(node);
    if (run_time_shape) {
      order = {kRunTimeShapeBackend};
      if (step.requested != kRunTimeShapeBackend)
        reasons = "its output shapes depend on input values: evaluated on " + std::string(kRunTimeShapeBackend) +
                  " each run and checked against the plan";
    }
    for (const auto& backend : order) {
      std::vector<int> in;
      for (const auto& name : node.inputs) in.push_back(name.empty() ? -1 : index_.at(name));
      // Asked before anything is built: a decline costs no kernel, and says whether the
      // node reads the backend's layouts.
      const Capability cap = registry_.query(backend, node_context(ni, in));
      if (!cap.accepted()) {
        if (cap.status.code() != StatusCode::kUnsupported && cap.status.code() != StatusCode::kNotFound)
          return cap.status.with_context(g.source + ": " + node.label());
        reasons += (reasons.empty() ? "" : "; ") + cap.status.message();
        continue;
      }
      const std::shared_ptr<Device> device = device_of(backend);
      if (device && training_ && !device->trains()) {
        reasons += (reasons.empty() ? "" : "; ") + backend + " computes on " + device->name() +
                   ", which cannot keep gradients in its memory (Device::zero, accumulate)";
        continue;
      }
      std::vector<int> out;
      int64_t t0 = 0;
      auto k = create_kernel(ni, backend, cap, run_time_shape, in, out, step, t0);
      if (k.ok()) {
        step.create_ns = now_ns() - t0;
        step.kernel = std::move(k.value());
        step.backend = backend;
        step.device = device.get();
        if (device && !device_backend_.count(device.get())) {
          device_backend_[device.get()] = backend;
          P.devices_.push_back(device);
        }
        // Inputs elsewhere are copied to where it computes (the context it was made with is
        // the same: copies keep the descriptor, and constants show their host tensors).
        for (int& v : in)
          if (v >= 0) {
            MOSAIC_ASSIGN_OR_RETURN(v, move_to(v, device));
          }
        step.in = in;
        step.out = out;
        for (int v : out)
          if (v >= 0) P.values_[v].device = device;
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
    step.widened_from = step.kernel->widened_from();
    for (size_t o = 0; o < step.out.size(); ++o) {
      const int v = step.out[o];
      if (v < 0) continue;
      P.values_[v].desc.layout = step.kernel->output_layout(o);
      step.out_bytes += P.values_[v].desc.bytes();
    }
    P.steps_.push_back(std::move(step));
    return Status::ok();
  }

  /// A value used by exactly one input slot (and not a graph output) gets its gradient
  /// written directly by that consumer; all others are zeroed and accumulated.
  void mark_direct_gradients() {
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
  }

  /// "'v' (the output of node 'conv1' (Conv))", and how many more share its buffer: what an
  /// error about a buffer names.
  std::string values_label(const std::vector<int>& values) const {
    if (values.empty()) return "no value";
    const int v = values.front();
    std::string label = "'" + P.values_[v].name + "'";
    for (const PlanStep& st : P.steps_)
      if (std::find(st.out.begin(), st.out.end(), v) != st.out.end()) {
        label += " (the output of " + g.nodes[st.node].label() + ")";
        break;
      }
    if (values.size() > 1) label += " and " + std::to_string(values.size() - 1) + " more values sharing it";
    return label;
  }

  /// A gradient buffer where the value lives: host memory in the tracker, or the device's
  /// (counted in device_bytes_; none with PlanOptions::allocate off). `what()` names its use
  /// in an error ("the gradient of 'x' ..."), built only when the device refuses.
  template <class What>
  Expected<std::shared_ptr<Buffer>> grad_buffer(const std::shared_ptr<Device>& device, size_t bytes, What what) {
    if (!device) return std::make_shared<Buffer>(bytes, &P.tracker_);
    P.device_bytes_[device->name()].gradients += static_cast<int64_t>(bytes);
    if (!options_.allocate) return std::shared_ptr<Buffer>();
    auto buffer = device_buffer(device, bytes, nullptr);
    if (!buffer.ok())
      return buffer.status().with_context(g.source + ": gradient buffer of " + std::to_string(bytes) + " bytes on " +
                                          device->name() + " for " + what());
    return buffer;
  }

  /// Gradient buffers, each where its value lives. Parameters, graph inputs and outputs, and
  /// values nobody consumes keep their own. An intermediate gradient lives only from the
  /// backward of its last consumer to that of its producer, so those share buffers (of their
  /// device), planned like activations in reverse order.
  Status plan_gradient_buffers() {
    const int nsteps = static_cast<int>(P.steps_.size());
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
        MOSAIC_ASSIGN_OR_RETURN(auto buffer, grad_buffer(pv.device, pv.desc.bytes(), [&] { return "the gradient of " + values_label({v}); }));
        pv.grad = Tensor::on_buffer(pv.desc, buffer);
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
      std::shared_ptr<Device> device;
    };
    std::vector<Slot> slots;
    for (const Interval& iv : pooled) {
      const PlanValue& pv = P.values_[iv.value];
      const size_t bytes = pv.desc.bytes();
      const int best = best_fit(slots, bytes, [&](const Slot& c) { return c.end < iv.begin && c.device == pv.device; });
      slots[best].device = pv.device;
      slots[best].bytes = std::max(slots[best].bytes, bytes);
      slots[best].end = iv.end;
      slots[best].values.push_back(iv.value);
    }
    for (const Slot& slot : slots) {
      MOSAIC_ASSIGN_OR_RETURN(auto buffer, grad_buffer(slot.device, slot.bytes, [&] { return "the gradient of " + values_label(slot.values); }));
      for (int v : slot.values) P.values_[v].grad = Tensor::on_buffer(P.values_[v].desc, buffer);
    }
    return Status::ok();
  }

  /// Per-input scratch that backward writes before accumulating (one buffer per input slot
  /// and place of the input's value, sized for the slots that accumulate; views accumulate
  /// directly).
  Status plan_backward_scratch() {
    auto scratched = [&](const PlanStep& st, size_t i) {
      return st.in[i] >= 0 && P.values_[st.in[i]].needs_grad && !st.direct[i] && !st.alias;
    };
    std::map<std::pair<size_t, std::shared_ptr<Device>>, size_t> scratch_bytes;
    for (const auto& st : P.steps_)
      for (size_t i = 0; i < st.in.size(); ++i)
        if (scratched(st, i)) {
          size_t& bytes = scratch_bytes[{i, P.values_[st.in[i]].device}];
          bytes = std::max(bytes, P.values_[st.in[i]].desc.bytes());
        }
    std::map<std::pair<size_t, std::shared_ptr<Device>>, std::shared_ptr<Buffer>> pool;
    for (const auto& [key, bytes] : scratch_bytes) {
      MOSAIC_ASSIGN_OR_RETURN(pool[key], grad_buffer(key.second, bytes, [&] { return "the backward scratch of input " + std::to_string(key.first); }));
    }
    for (auto& st : P.steps_) {
      st.scratch.resize(st.in.size());
      for (size_t i = 0; i < st.in.size(); ++i)
        if (scratched(st, i)) st.scratch[i] = Tensor::on_buffer(P.values_[st.in[i]].desc, pool.at({i, P.values_[st.in[i]].device}));
    }
    return Status::ok();
  }

  Plan& P;
  Graph& g;
  const Placement& placement_;
  const KernelRegistry& registry_;
  const PlanOptions& options_;
  const bool training_;
  const size_t original_nodes_;
  std::map<std::string, int> index_;
  std::map<std::string, std::vector<size_t>> consumers_;
  std::set<std::string> graph_outputs_;
  std::map<int, int> plain_copy_;  // value in a layout -> its converted plain value
  std::map<std::pair<int, const Device*>, int> moved_;  // (value, place) -> its copy there
  std::map<int, int> resident_of_;                      // resident device copy -> host constant
  std::map<const Device*, std::string> device_backend_;  // device -> the first backend computing there
};

Expected<std::unique_ptr<Plan>> Plan::build(const Graph& graph, const Placement& placement,
                                            const KernelRegistry& registry, const PlanOptions& options) {
  for (const auto& b : placement.asked_backends()) {
    const BackendInfo* info = registry.info(b);
    if (!info) continue;
    if (const std::string why = backend_unavailable(*info); !why.empty())
      return Status::unsupported("backend " + b + " is unavailable here: " + why);
    if (options.training && info->device && !info->device->trains())
      return Status::unsupported("backend " + b + " computes on " + info->device->name() +
                                 ", which cannot keep gradients in its memory (Device::zero, accumulate): "
                                 "training plans on it are refused");
  }
  if (options.precision != Precision::kF32) {
    for (const auto& b : placement.asked_backends()) {
      const BackendInfo* info = registry.info(b);
      const std::string why = info ? precision_declined(*info, options.precision) : "";
      if (!why.empty())
        return Status::unsupported("backend " + b + " declines --precision " + precision_name(options.precision) + ": " + why);
    }
  }
  auto plan = std::make_unique<Plan>();
  plan->graph_ = graph;
  plan->placement_ = placement;
  plan->options_ = options;
  PlanBuilder b(*plan, plan->placement_, registry, plan->options_);
  b.register_values();
  b.mark_gradients();
  MOSAIC_RETURN_IF_ERROR(b.create_kernels());
  MOSAIC_RETURN_IF_ERROR(b.make_parameters_resident());
  b.note_resident_copies();
  b.find_device_read_inputs();
  b.count_device_workspaces();
  MOSAIC_RETURN_IF_ERROR(b.plan_activations());
  b.bind_tensors();
  MOSAIC_RETURN_IF_ERROR(b.plan_gradients());
  return plan;
}

}  // namespace mosaic
