// Kernel interface and the explicit per-backend kernel registry.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/device.hpp"
#include "ir/graph.hpp"
#include "ir/status.hpp"
#include "ir/tensor.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

/// The arithmetic a plan asks its compute-heavy kernels for. f32 everywhere by default;
/// bf16: convolutions and matrix products read bfloat16 copies of their inputs and weights
/// and accumulate and write float32 (element-wise ops, normalisation and everything else
/// stay float32). In training plans their backward passes read bfloat16 copies of the
/// output's gradient, the input and the weights, and write float32 gradients (mixed
/// precision: parameters and optimizer state stay float32). tf32: convolutions and matrix
/// products may round their operands to TF32 (10 mantissa bits) on a GPU's tensor cores and
/// accumulate in float32 (NVIDIA's TF32 mode; the cuda backend). fp16: convolutions and
/// matrix products read IEEE float16 copies of their inputs and weights (rounded to nearest
/// even; weights once per plan) and accumulate in float32 on a GPU's tensor cores (the cuda
/// backend, inference; there bf16 is the same with bfloat16 operands). Only backends whose
/// BackendInfo::declines_precision accepts it get it.
enum class Precision { kF32, kBF16, kTF32, kF16 };
/// "f32", "bf16", "tf32", "fp16".
const char* precision_name(Precision p);
/// "f32"/"fp32"/"float32", "bf16"/"bfloat16", "tf32" or "fp16"/"f16"/"float16"/"half"; an
/// error naming the value otherwise.
Expected<Precision> parse_precision(const std::string& text);

/// Everything a kernel may look at when it is created (the "create" stage): the node,
/// static input/output descriptors and the values of constant inputs (weights, so kernels
/// can prepack them once; OpContext), and the plan's settings below.
struct KernelContext : OpContext {
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
  /// The arithmetic of convolutions and matrix products (Precision). Kernels of a backend
  /// that declines a precision never see it (Plan::build refuses the plan first).
  Precision precision = Precision::kF32;
  /// Where output i may be left in this backend's own layout: every consumer is placed on
  /// the same backend and reads its layouts (KernelTraits::layouts, Capability). In training
  /// plans the gradient of such an output arrives in the same layout, and the gradient of
  /// an input in a layout must be written in that layout.
  std::vector<bool> output_layout_free;

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
  /// Whether forward updates input i in place (a training BatchNormalization's running
  /// statistics). Where that input is a device's resident copy of a host constant, the plan
  /// copies it back on request (Plan::copy_device_state_to_host: checkpoints, saved models).
  virtual bool updates_input(size_t) const { return false; }
  /// Computes outputs from inputs. Omitted optional inputs/outputs are nullptr.
  virtual Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) = 0;
  /// Bytes of scratch and prepacked data this kernel holds (reported as workspace).
  virtual size_t workspace_bytes() const { return 0; }
  /// If true, output 0 is a view of input 0 (same bytes, new shape); forward is not called.
  virtual bool aliases_input() const { return false; }
  /// The layout forward writes output i in (nullptr: plain). Only non-null where the
  /// context allowed it (KernelContext::layout_free).
  virtual std::shared_ptr<const Layout> output_layout(size_t) const { return nullptr; }
  /// The element type its node's tensors are widened from where a kernel written for wider
  /// ones runs it ("float16": core/promote.hpp's adapters convert around it each run); "" where
  /// it computes in the node's own types. The plan and bench's nodes say so.
  virtual std::string widened_from() const { return ""; }
};

/// Op type of the conversion step the planner inserts to turn a backend's layout into a
/// plain tensor. Every backend that produces layouts registers a kernel for it.
inline constexpr const char* kToPlainOp = "mosaic.ToPlain";
/// Op types of the copy steps the planner inserts where a value crosses between host memory
/// and a device backend's memory (BackendInfo::device); no backend registers them.
inline constexpr const char* kToDeviceOp = "mosaic.ToDevice";
inline constexpr const char* kToHostOp = "mosaic.ToHost";

using KernelFactory = std::function<Expected<std::unique_ptr<Kernel>>(const KernelContext&)>;

/// Which of its backend's own layouts a kernel reads (and may write its outputs in).
enum class LayoutUse : uint8_t {
  kNone,       ///< plain tensors only: inputs in a layout are converted before it
  kInference,  ///< layouts in inference plans
  kTraining,   ///< layouts in inference and training plans (backward reads and writes
               ///< gradients in the layouts of the values they belong to)
};

/// A cheap test of whether a kernel can run one node: ok, or kUnsupported with the reason.
/// It reads the node's attributes and the context's descriptors and constants, must not
/// build or allocate anything, and must not depend on input layouts (whether an input
/// arrives in a layout is decided from the answer).
using SupportCheck = std::function<Status(const KernelContext&)>;

/// What a kernel declares besides its factory: what the planner asks before building it.
struct KernelTraits {
  LayoutUse layouts = LayoutUse::kNone;
  /// Empty: every node of the op. Creation may still decline where only the library knows
  /// (oneDNN's "no implementation for this configuration"); the plan records both alike.
  SupportCheck supports;
  /// The element types it reads and writes: a node with any present input or output of
  /// another type is declined with the type named, before `supports` is asked (which, like
  /// the kernel, may then assume them).
  DTypeSet dtypes = kBaseDTypes;
};

/// A backend's answer about one node, before any kernel is built (KernelRegistry::query).
struct Capability {
  Status status;         ///< ok: it takes the node; kUnsupported or kNotFound: why not
  bool layouts = false;  ///< reads its inputs in the backend's layouts, may write outputs in them
  bool accepted() const { return status.is_ok(); }
};

/// What a backend says about itself on this machine, the one source provenance, reports and
/// `mosaic backends` read (as ggml's backends answer a properties query).
struct BackendProperties {
  /// The libraries behind it and their versions ({"OpenBLAS", "0.3.21 DYNAMIC_ARCH ..."}).
  std::vector<std::pair<std::string, std::string>> libraries;
  /// The kernels it picks here ({"blas_core", "SkylakeX"}, {"isa", "avx512_core_bf16"}):
  /// what makes the same build time differently on another machine.
  std::vector<std::pair<std::string, std::string>> kernels;
  /// Environment variables set now that override that choice ("OPENBLAS_CORETYPE").
  std::vector<std::string> forced_by;
};

/// What a backend is, as `mosaic backends` and every report list it.
struct BackendInfo {
  std::string name;
  std::string summary;  ///< how it computes, one line ("plain loops: the reference oracle")
  /// Its properties now (cheap; called for every report). Unset: nothing to say.
  std::function<BackendProperties()> properties;
  /// Why the backend cannot compute in `p` on this machine ("" if it can). Unset: float32
  /// only, every other precision declined as such.
  std::function<std::string(Precision p)> declines_precision;
  /// Where its kernels compute (ir/device.hpp); nullptr: in host memory. A device backend's
  /// kernels get every input, and write every output, in the device's memory: the planner
  /// copies values in and out as timed steps, and keeps a resident copy of each constant they
  /// read (KernelContext::constants still shows the host's, to decide on prepacking).
  std::shared_ptr<Device> device{};
  /// Why it cannot run on this machine now ("" if it can; unset: it always can), e.g. no GPU
  /// or no driver. A plan that asks for it is refused with the reason, a fallback to it is
  /// skipped, and "all" leaves it out and says why.
  std::function<std::string()> unavailable{};
};
/// Why `info`'s backend cannot run here now ("" if it can).
std::string backend_unavailable(const BackendInfo& info);
/// Why `info`'s backend cannot compute in `p` here ("" if it can).
std::string precision_declined(const BackendInfo& info, Precision p);

/// Maps (backend, op type) to a kernel factory and its traits. Each backend fills it
/// through an explicit `Status register_<backend>(Registrar&)` call (core/registration.hpp:
/// a BackendRegistration chained over the registrar); nothing self-registers. A backend is registered once, each of its
/// kernels once.
class KernelRegistry {
 public:
  /// Registers a backend. An empty name, one with a space or a character of the
  /// --backends/--assign syntax (, = @ *), or a name already registered is an error.
  Status add_backend(BackendInfo info);
  /// Adds a registered backend's kernel for op_type; an unknown backend, or an op the
  /// backend already has a kernel for, is an error.
  Status add(const std::string& backend, const std::string& op_type, KernelFactory factory, KernelTraits traits = {});
  /// Replaces a kernel the backend has (a test planting a bug in one op of a backend); the
  /// traits stay.
  Status replace(const std::string& backend, const std::string& op_type, KernelFactory factory);
  /// nullptr for an unknown backend.
  const BackendInfo* info(const std::string& backend) const;
  bool has_backend(const std::string& backend) const;
  /// Why a registered backend cannot run here now ("" if it can, or if it is unknown).
  std::string unavailable(const std::string& backend) const;
  /// The registered backends that can run here now (what "all" means), in order.
  std::vector<std::string> available_backends() const;
  bool has_kernel(const std::string& backend, const std::string& op_type) const;
  std::vector<std::string> backends() const;
  std::vector<std::string> ops(const std::string& backend) const;
  /// The kernel's traits; nullptr where the backend has no kernel for op_type.
  const KernelTraits* traits(const std::string& backend, const std::string& op_type) const;
  /// Whether `backend` takes the node in `ctx` (ctx.node, ctx.training, descriptors), and
  /// whether in its layouts, without building a kernel: an unknown backend is kNotFound, an
  /// unavailable one (BackendInfo::unavailable), a missing kernel or a failed SupportCheck
  /// kUnsupported with the reason.
  Capability query(const std::string& backend, const KernelContext& ctx) const;
  /// Creates the kernel (after its SupportCheck), or returns kUnsupported with the reason.
  Expected<std::unique_ptr<Kernel>> create(const std::string& backend, const KernelContext& ctx) const;

 private:
  struct Entry {
    KernelFactory factory;
    KernelTraits traits;
  };
  const Entry* entry(const std::string& backend, const std::string& op_type) const;
  std::map<std::string, std::map<std::string, Entry>> table_;
  std::vector<BackendInfo> order_;
};

/// Helper for kernels that are a plain function of the context (and of constructor arguments
/// fixed at registration, copied into the factory).
template <class K, class... Args>
KernelFactory make_factory(Args... args) {
  return [args...](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<K>(args...);
    Status st = k->init(ctx);
    if (!st.is_ok()) return st;
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

}  // namespace mosaic
