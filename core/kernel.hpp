// Kernel interface and the explicit per-backend kernel registry.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "core/status.hpp"
#include "core/tensor.hpp"

namespace mosaic {

/// Everything a kernel may look at when it is created (the "create" stage):
/// the node, static input/output descriptors, and the values of constant inputs
/// (weights), so kernels can prepack them once.
struct KernelContext {
  const Node* node = nullptr;
  int64_t opset = 13;
  std::vector<TensorDesc> inputs;          ///< empty shape + missing flag for omitted inputs
  std::vector<bool> input_present;
  std::vector<TensorDesc> outputs;
  std::vector<bool> output_present;
  std::vector<const Tensor*> constants;    ///< non-null where input i is an initializer
  MemoryTracker* tracker = nullptr;        ///< report workspace/prepacked allocations here
  /// Training plan: the kernel runs forward in training mode (Dropout masks, batch
  /// statistics) and must keep what its backward needs.
  bool training = false;
  /// Seed for stochastic kernels (Dropout), distinct per node.
  uint64_t seed = 0;
  /// Results must repeat bit for bit at a fixed thread count: no work split that depends
  /// on timing (im2col's convolution backward takes chunks statically instead of
  /// dynamically). Somewhat slower where threads run at different speeds.
  bool deterministic = false;
  /// Where output i may be left in this backend's own layout: every consumer is a
  /// layout-aware op on the same backend (see KernelRegistry::add_layout_op). In training
  /// plans the gradient of such an output arrives in the same layout, and the gradient of
  /// an input in a layout must be written in that layout.
  std::vector<bool> output_layout_free;

  bool has_input(size_t i) const { return i < input_present.size() && input_present[i]; }
  bool has_output(size_t i) const { return i < output_present.size() && output_present[i]; }
  const Tensor* constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
  /// Layout of input i (nullptr: plain). Non-null only for layout-aware ops.
  const Layout* input_layout(size_t i) const { return i < inputs.size() ? inputs[i].layout.get() : nullptr; }
  bool layout_free(size_t i) const { return i < output_layout_free.size() && output_layout_free[i]; }
};

/// Arguments of a backward call, indexed like the node's inputs and outputs. `src` and
/// `dst` are the forward tensors; `diff_dst[i]` is the loss gradient w.r.t. output i
/// (nullptr if none flows back); the kernel overwrites every non-null `diff_src[i]` with
/// the gradient w.r.t. input i (nullptr: not needed).
struct BackwardArgs {
  std::vector<const Tensor*> src;
  std::vector<const Tensor*> dst;
  std::vector<const Tensor*> diff_dst;
  std::vector<Tensor*> diff_src;
};

/// A compiled node on one backend. Created once per plan; forward is the hot path.
class Kernel {
 public:
  virtual ~Kernel() = default;
  /// Gradients of the inputs from the gradients of the outputs (training).
  virtual Status backward(const BackwardArgs&) { return Status::unsupported("this kernel has no backward"); }
  /// True if backward is implemented (training plans fall back from kernels without it).
  virtual bool has_backward() const { return false; }
  /// Whether backward reads forward input i / output i. A training plan keeps a tensor
  /// until backward only if some backward reads it, and reuses the rest of the buffers as
  /// inference does (a convolution's output that only a Relu reading its own output
  /// consumes is not kept). Conservative default: everything is read.
  virtual bool backward_reads_input(size_t) const { return true; }
  virtual bool backward_reads_output(size_t) const { return true; }
  /// Computes outputs from inputs. Omitted optional inputs/outputs are nullptr.
  virtual Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) = 0;
  /// Bytes of scratch and prepacked data this kernel holds (reported as workspace).
  virtual size_t workspace_bytes() const { return 0; }
  /// If true, output 0 is a view of input 0 (same bytes, new shape); forward is not called.
  virtual bool aliases_input() const { return false; }
  /// The layout forward writes output i in (nullptr: plain). Only non-null where the
  /// context allowed it (KernelContext::layout_free).
  virtual std::shared_ptr<const Layout> output_layout(size_t) const { return nullptr; }
};

/// Op type of the conversion step the planner inserts to turn a backend's layout into a
/// plain tensor. Every backend that produces layouts registers a kernel for it.
inline constexpr const char* kToPlainOp = "mosaic.ToPlain";

using KernelFactory = std::function<Expected<std::unique_ptr<Kernel>>(const KernelContext&)>;

/// What a backend is, as `mosaic backends` and every report list it.
struct BackendInfo {
  std::string name;
  std::string summary;  ///< how it computes, one line ("plain loops: the reference oracle")
  /// The libraries behind it and their versions ({"OpenBLAS", "0.3.21 DYNAMIC_ARCH ..."}),
  /// as provenance records them; cheap. May be empty.
  std::function<std::vector<std::pair<std::string, std::string>>()> details;
};

/// Maps (backend, op type) to a kernel factory. Each backend fills it through an
/// explicit `register_<backend>_kernels(KernelRegistry&)` call (BackendRegistration);
/// nothing self-registers. A backend is registered once, each of its kernels once.
class KernelRegistry {
 public:
  /// Registers a backend. An empty name, one with a space or a character of the
  /// --backends/--assign syntax (, = @ *), or a name already registered is an error.
  Status add_backend(BackendInfo info);
  /// Adds a registered backend's kernel for op_type; an unknown backend, or an op the
  /// backend already has a kernel for, is an error.
  Status add(const std::string& backend, const std::string& op_type, KernelFactory factory);
  /// Replaces a kernel the backend has (a test planting a bug in one op of a backend).
  Status replace(const std::string& backend, const std::string& op_type, KernelFactory factory);
  /// nullptr for an unknown backend.
  const BackendInfo* info(const std::string& backend) const;
  bool has_backend(const std::string& backend) const;
  bool has_kernel(const std::string& backend, const std::string& op_type) const;
  std::vector<std::string> backends() const;
  std::vector<std::string> ops(const std::string& backend) const;
  /// Declares that the backend's kernel for op_type accepts inputs in the backend's own
  /// layouts (and may produce them); `in_training` if its training kernel does too, with
  /// backward reading and writing gradients in the layouts of the values they belong to.
  void add_layout_op(const std::string& backend, const std::string& op_type, bool in_training = false);
  bool accepts_layouts(const std::string& backend, const std::string& op_type, bool training = false) const;
  /// Creates the kernel, or returns kUnsupported with the reason.
  Expected<std::unique_ptr<Kernel>> create(const std::string& backend, const KernelContext& ctx) const;

 private:
  std::map<std::string, std::map<std::string, KernelFactory>> table_;
  std::map<std::string, std::set<std::string>> layout_ops_, training_layout_ops_;
  std::vector<BackendInfo> order_;
};

/// Registers one backend and its kernels in a chain; the first error (a duplicate) is kept,
/// later calls do nothing, and status() returns it:
///
///   BackendRegistration r(registry, {"mine", "what it computes with", nullptr});
///   r.kernel("Conv", make_factory<MyConv>()).kernel("Relu", make_factory<MyRelu>());
///   return r.status();
class BackendRegistration {
 public:
  BackendRegistration(KernelRegistry& registry, BackendInfo info);
  BackendRegistration& kernel(const std::string& op_type, KernelFactory factory);
  /// KernelRegistry::add_layout_op for this backend.
  BackendRegistration& layouts(const std::string& op_type, bool in_training = false);
  const std::string& name() const { return name_; }
  Status status() const { return status_; }

 private:
  KernelRegistry& registry_;
  std::string name_;
  Status status_;
};

/// Helper for kernels that are a plain function of the context.
template <class K>
KernelFactory make_factory() {
  return [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<K>();
    Status st = k->init(ctx);
    if (!st.is_ok()) return st;
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

}  // namespace mosaic
