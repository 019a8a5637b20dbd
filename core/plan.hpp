// Placement (which backend runs which node), the Plan (kernels + statically planned
// memory), and its executor.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/events.hpp"
#include "ir/graph.hpp"
#include "core/kernel.hpp"

namespace mosaic {

/// Which backend each node asks for, and where to go when it cannot run there.
/// Spec syntax: comma-separated `KEY=BACKEND`, KEY being an op type (`Conv`), a node
/// name prefixed with `@` (`@conv1`), a node-name glob prefixed with `@`
/// (`@/features/*`, shell wildcards * ? [...]), or `*` for every other node. A node's
/// backend is its name's, else the first glob (in spec order) its name matches, else its
/// op type's, else the default.
struct Placement {
  std::string default_backend = "naive";
  std::map<std::string, std::string> by_op;
  std::map<std::string, std::string> by_name;
  std::vector<std::pair<std::string, std::string>> by_glob;  ///< (pattern, backend), in order
  std::vector<std::string> fallback = {"naive"};  ///< tried in order after the requested backend

  static Expected<Placement> parse(const std::string& spec, const KernelRegistry& registry);
  /// Adds one KEY=BACKEND of the spec syntax; an unknown backend or op type is an error.
  Status add(const std::string& key, const std::string& backend, const KernelRegistry& registry);
  static Placement all_on(const std::string& backend, std::vector<std::string> fallback = {"naive"});
  /// The backend asked for `node`: by name (a fused node "a+b" by the first of its parts
  /// that is named), else by op type, else the default.
  const std::string& backend_for(const Node& node) const;
  /// Whether a rule of its own places `node` (its name, a glob or its op type), not the default.
  bool places_explicitly(const Node& node) const;
  /// The backends it asks for: the default and every rule's (not the fallbacks).
  std::set<std::string> asked_backends() const;
  /// Every `@NAME` key names a node of `graph` (as loaded, before fusion), and every glob
  /// matches one.
  Status check_names(const Graph& graph) const;
  std::string str() const;
};

/// How a plan is built. A training plan runs kernels in training mode, keeps every
/// activation alive for the backward pass, owns copies of the trainable parameters (the
/// model's float initializers not listed in `frozen`) and computes their gradients.
struct PlanOptions {
  bool training = false;
  uint64_t seed = 0;              ///< seeds stochastic kernels (Dropout), per node
  std::set<std::string> frozen;   ///< initializers that are not trained
  bool input_grads = false;       ///< also compute gradients w.r.t. the graph inputs
  /// Float initializers may change between runs (they are another plan's parameters):
  /// kernels must not prepack them.
  bool shared_weights = false;
  /// False: plan placement, layouts and memory sizes without allocating activation buffers
  /// (`mosaic info` on any batch size); such a plan cannot run.
  bool allocate = true;
  /// Kernels avoid timing-dependent work splits (KernelContext::deterministic).
  bool deterministic = false;
  /// Arithmetic of convolutions and matrix products (core/kernel.hpp). bf16: every backend
  /// the placement asks for (its default and rules; not the fallbacks, whose nodes compute
  /// in float32) must accept it, or the plan is refused with the backend's reason. Training
  /// plans keep float32 parameters, gradients and optimizer state (mixed precision).
  Precision precision = Precision::kF32;
  /// Training plans: a parameter only kernels on one device read lives in that device's
  /// memory with its gradient (a resident parameter), copied there once at build instead of
  /// by a step each run; parameters() then gives the device's tensors, and the training loop
  /// updates them through optimizer_step(). Off: every parameter is the host's, copied in and
  /// its gradient out each step (what every caller reading parameters on the host expects).
  bool resident_parameters = false;
  /// Training plans of one output: where a device computes that output and the losses
  /// (Device::class_loss), the output stays in its memory (no copy step; output(0) is the
  /// device's tensor) and loss() computes there, only each row's loss and hit coming back.
  /// Off: the output comes to the host. Either way loss() and backward_from_loss() train it.
  bool loss_on_device = false;
};

struct LossValue;

class Optimizer;

/// A trainable parameter of a training plan: its value (updated in place by optimizers)
/// and the gradient of the last backward pass.
struct ParamRef {
  std::string name;
  Tensor value;
  Tensor grad;
};

/// A value slot of the plan: a graph input, constant or intermediate.
struct PlanValue {
  std::string name;
  TensorDesc desc;
  Tensor tensor;        ///< bound once at build time (constants, planned buffers, views)
  bool is_const = false;
  bool is_input = false;
  bool trainable = false;  ///< a parameter of a training plan
  bool needs_grad = false; ///< depends on a parameter (training plans)
  bool accumulated = false;  ///< its gradient is summed from several contributions (zeroed first)
  bool grad_pooled = false;  ///< its gradient buffer is shared with others live at other times
  int storage = -1;     ///< index into the plan's storage list (-1: constant, or an input only a device's copy reads)
  /// A resident parameter (PlanOptions::resident_parameters): the host value it mirrors
  /// (its name, its initial value); -1 otherwise.
  int host_mirror = -1;
  Tensor grad;          ///< gradient buffer (training plans, needs_grad values)
  /// The device its bytes live on (BackendInfo::device of the backend that writes it, or of
  /// the kernels a resident constant copy is for); nullptr: host memory.
  std::shared_ptr<Device> device;
};

struct PlanStep {
  int node = 0;                  ///< index into graph().nodes
  std::string backend;           ///< backend that runs it
  std::string requested;         ///< backend placement asked for
  std::string fallback_reason;   ///< why `requested` could not run it (empty if it did)
  /// The element type its kernel widens the node's tensors from ("float16"; Kernel::widened_from),
  /// "" where it computes in them.
  std::string widened_from;
  std::unique_ptr<Kernel> kernel;
  std::vector<int> in, out;      ///< value indices (-1: omitted)
  std::vector<const Tensor*> src;
  std::vector<Tensor*> dst;
  std::vector<Tensor> scratch;   ///< per input: where backward writes its gradient
  std::vector<bool> direct;      ///< per input: sole consumer, so backward writes the gradient itself
  std::vector<int> zero_grads;   ///< pooled accumulated gradients first written by this step's backward
  double flops = 0;
  /// Training plans: backward FLOPs of the gradients this step computes, for activations
  /// (inputs that depend on a parameter) and for parameters apart.
  double backward_flops_data = 0, backward_flops_weights = 0;
  size_t out_bytes = 0;
  bool alias = false;
  bool conversion = false;       ///< a layout conversion or device copy the planner inserted
  Device* device = nullptr;      ///< where it computes (its backend's device); nullptr: host
  bool flows = false;            ///< training: a gradient flows back through it (an input needs one)
  int64_t create_ns = 0;
  bool fell_back() const { return !fallback_reason.empty(); }
};

/// Host memory page-locked for a plan's devices (Plan::pin_inputs), unpinned when it goes.
class PinnedHost {
 public:
  PinnedHost() = default;
  PinnedHost(PinnedHost&&) = default;
  PinnedHost& operator=(PinnedHost&&) = delete;
  PinnedHost(const PinnedHost&) = delete;
  ~PinnedHost() {
    for (const auto& [device, host] : pins_) device->unpin(host);
  }
  /// The bytes pinned.
  size_t bytes() const { return bytes_; }

 private:
  friend class Plan;
  std::vector<std::pair<std::shared_ptr<Device>, void*>> pins_;
  size_t bytes_ = 0;
};

/// Told during Plan::backward when each backward step has finished, so that the gradients
/// it made final can be used at once (data-parallel training starts reducing them while
/// the rest of backward runs).
class BackwardListener {
 public:
  virtual ~BackwardListener() = default;
  virtual void after_backward_step(int step) = 0;
};

/// Something that exchanges gradients around each backward pass (data-parallel training):
/// begin_step() before backward, the listener during it, finish_step() after it, when the
/// parameters' gradients must be final and global.
class GradientExchange : public BackwardListener {
 public:
  virtual void begin_step() = 0;
  virtual void finish_step() = 0;
};

class Plan {
 public:
  /// Creates a kernel for every node (create stage) and plans activation memory.
  static Expected<std::unique_ptr<Plan>> build(const Graph& graph, const Placement& placement,
                                               const KernelRegistry& registry, const PlanOptions& options = {});

  /// Runs one forward pass. `inputs` follow graph().inputs; outputs follow graph().outputs.
  Status run(const std::vector<Tensor>& inputs, std::vector<Tensor>* outputs, ExecObserver* observer = nullptr,
             int64_t iteration = 0);

  /// Backward pass of a training plan: `output_grads` (one per graph output) are the loss
  /// gradients w.r.t. the outputs of the last run(); fills every parameter's gradient.
  Status backward(const std::vector<Tensor>& output_grads, ExecObserver* observer = nullptr, int64_t iteration = 0,
                  BackwardListener* listener = nullptr);
  /// Training plans: the loss named `name` (core/loss.hpp's class_loss: "cross-entropy",
  /// "mse") of output 0 of the last run against `labels` (host, int64), computed where the
  /// output is (PlanOptions::loss_on_device), with the output's gradient kept for
  /// backward_from_loss(). Bad labels are refused before anything runs.
  Expected<LossValue> loss(const std::string& name, const Tensor& labels);
  /// backward() from the gradient the last loss() left (other outputs: zero gradients).
  Status backward_from_loss(ExecObserver* observer = nullptr, int64_t iteration = 0,
                            BackwardListener* listener = nullptr);
  /// The trainable parameters (training plans), in initializer name order; a resident
  /// parameter's value and gradient are its device's tensors (Tensor::device(); clone() reads
  /// them).
  std::vector<ParamRef> parameters() const;
  /// One optimizer step over parameters(), wherever they live: host parameters as
  /// Optimizer::step does; resident ones by their device where it computes the optimizer's
  /// rule (Device::optimizer_step: SGD with momentum, Adam, AdamW), their state kept there
  /// (zeroed at a fresh optimizer's first step); else through host mirrors (value and gradient
  /// copied out, the host step with the optimizer's state, the value copied back).
  Status optimizer_step(Optimizer& optimizer);
  /// Training plans: every parameter's gradient is computed into `grads[i]`'s buffer from
  /// now on (parameters() order; buffers at least as large as the gradients they replace),
  /// e.g. memory that other processes can read. Call before taking parameters(): earlier
  /// ParamRefs keep the old buffers.
  Status bind_parameter_grads(const std::vector<Tensor>& grads);
  /// Per parameter (parameters() order): the step after whose backward its gradient is
  /// final (the lowest-numbered step that reads it; backward runs steps in reverse), or -1
  /// when no step reads it (its gradient is final before backward starts).
  std::vector<int> grad_final_step() const;
  /// Page-locks (Device::pin) the caller's tensors of the inputs only copies to a device read
  /// (device_read_inputs_), which run() copies from directly, until the result goes: those
  /// copies then run at the bus's rate. `inputs` must outlive the result and be what run() is
  /// given. Inputs a host kernel reads, and devices that do not pin, are left as they are.
  PinnedHost pin_inputs(const std::vector<Tensor>& inputs) const;
  /// What changes on a device copied over its host value, which evaluation plans,
  /// checkpoints and saved models read: resident parameters (into their host mirrors) and
  /// constants a kernel there updates in place (a training BatchNormalization's running
  /// statistics).
  Status copy_device_state_to_host();
  /// Every resident copy, parameters' and constants', refreshed from its host value (after a
  /// checkpoint was restored into the host values).
  Status copy_host_state_to_devices();
  /// The optimizer's state as Optimizer::state() holds it for parameters() in order (what
  /// checkpoints save), with the state optimizer_step keeps on a device for a resident
  /// parameter copied out into its place. Empty before the first step.
  Expected<std::vector<std::vector<std::vector<float>>>> optimizer_state(const Optimizer& optimizer) const;
  /// Sets the optimizer's state from that form (a checkpoint's, for parameters() in order):
  /// where optimizer_step computes a resident parameter's rule on its device, that
  /// parameter's buffers go there (each checked against the parameter's size first), the
  /// rest to the optimizer. Set the optimizer's step count first.
  Status set_optimizer_state(Optimizer& optimizer, const std::vector<std::vector<std::vector<float>>>& state);
  /// Training plans: page-locks the host buffers a step copies to a device each run, the
  /// parameters (the planner keeps them the host's), and their gradients, which the copies'
  /// backward brings back, until the result goes. Nothing where no device pins.
  PinnedHost pin_parameters() const;
  /// Output i of the last run, without copying.
  const Tensor& output(size_t i) const { return values_[output_values_[i]].tensor; }
  /// Gradient of a graph input after backward (nullptr if it has none).
  const Tensor* input_grad(size_t i) const;
  bool training() const { return options_.training; }

  const Graph& graph() const { return graph_; }
  const std::vector<PlanStep>& steps() const { return steps_; }
  const std::vector<PlanValue>& values() const { return values_; }
  const Placement& placement() const { return placement_; }
  const PlanOptions& options() const { return options_; }
  const Node& node(const PlanStep& s) const { return graph_.nodes[s.node]; }

  MemoryTracker& tracker() { return tracker_; }
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t activation_bytes() const { return activation_bytes_; }
  /// The most bytes of attention-score tensors (core/fuse.hpp: attention_scores) live at one
  /// step: in training the ones kept for backward add up across layers; in inference a
  /// chain's few at a time; 0 once attention is fused (its blocks are kernel workspace).
  int64_t attention_bytes() const { return attention_bytes_; }
  /// What the host's kernels hold besides their outputs (scratch, prepacked weights), now; a
  /// device's kernels' is in device_bytes().
  int64_t workspace_bytes() const;
  /// What the plan holds on each device it uses, by Device::name: its activation buffers, the
  /// resident copies of constants, its kernels' workspaces (a convolution algorithm's, index
  /// maps; as the kernels were built) and, in training plans, the gradients of the values it
  /// computes there with their backward scratch (activation_bytes(), weight_bytes() and
  /// workspace_bytes() count the host's).
  struct DeviceBytes {
    int64_t activations = 0, constants = 0, workspace = 0, gradients = 0;
    int64_t parameters = 0;  ///< resident parameters (PlanOptions::resident_parameters)
    int64_t optimizer_state = 0;  ///< their optimizer state, where the device computes the rule
  };
  const std::map<std::string, DeviceBytes>& device_bytes() const { return device_bytes_; }
  /// The devices its steps compute on, in the order the plan first uses them.
  const std::vector<std::shared_ptr<Device>>& devices() const { return devices_; }
  int fallback_count() const;
  int conversion_count() const;

 private:
  friend class PlanBuilder;  // the passes of Plan::build (plan_build.cpp)
  Graph graph_;
  Placement placement_;
  PlanOptions options_;
  std::vector<PlanValue> values_;
  std::vector<PlanStep> steps_;
  std::vector<std::shared_ptr<Buffer>> storage_;
  std::vector<int> input_values_, output_values_;
  MemoryTracker tracker_;
  int64_t weight_bytes_ = 0, activation_bytes_ = 0, attention_bytes_ = 0;
  std::map<std::string, DeviceBytes> device_bytes_;
  /// Resident parameters' host mirrors of their gradients (optimizer_step's copy path), by
  /// the device value's index.
  std::map<int, Tensor> mirror_grads_;
  /// Resident parameters' optimizer state on their devices (optimizer_step), by device value.
  std::map<int, std::vector<Tensor>> device_state_;
  /// loss(): output 0's gradient (where the output is), and on a device the labels and each
  /// row's loss and hit there.
  Tensor loss_grad_;
  std::shared_ptr<Buffer> loss_labels_, loss_rows_, loss_hits_;
  /// Resident copies of constants on devices: (device value, host value, a kernel there
  /// updates it in place).
  struct ResidentCopy {
    int device_value, host_value;
    bool updated;
  };
  std::vector<ResidentCopy> resident_copies_;
  /// A parameter's name: a resident one's is its host mirror's.
  const std::string& parameter_name(const PlanValue& v) const;
  /// The trainable values' indices in parameters() order.
  std::vector<int> trainable_values() const;
  /// The device rule optimizer_step applies to resident parameters at step t (every
  /// resident parameter's device computes it), or nothing (host mirrors, or none resident);
  /// `trainable` is trainable_values().
  std::optional<OptimizerRule> resident_rule(const Optimizer& optimizer, int64_t t, const std::vector<int>& trainable) const;
  /// Resident parameter value v's optimizer state buffers on its device, `buffers` of them
  /// (allocated, zero-filled, when first asked for).
  Expected<std::vector<Tensor>*> device_optimizer_state(int v, int buffers);
  std::vector<std::shared_ptr<Device>> devices_;  // every device a step computes on
  /// Per graph input: where only copies to a device read it (an input that
  /// is not also an output), those copies' (step, input slot); run() points them at the
  /// caller's tensor for the run instead of first copying it into the plan, and the plan
  /// holds no host buffer for it. Empty: run() copies the input into the plan's buffer.
  std::vector<std::vector<std::pair<size_t, size_t>>> device_read_inputs_;
};

}  // namespace mosaic
