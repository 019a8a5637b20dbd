// The operator/backend plugin interface: what a shared library loaded with `--plugin
// lib.so` registers through. A plugin can
//   - add a backend (BackendInfo) and its kernels,
//   - add kernels for ONNX ops to an existing backend (a built-in one or another plugin's),
//   - add a custom-domain operator: its schema (arity, shape inference, forward and backward
//     FLOPs) and, registered on the "naive" backend, its reference forward and backward.
// Plugin kernels take part in placement, the check against naive, gradcheck and
// benchmarking exactly as built-in kernels do: they go into the same registry.
//
// A plugin includes this header (and the core headers it pulls in), defines
//
//   mosaic::Status my_registration(mosaic::PluginRegistrar& r) { ... }
//   MOSAIC_PLUGIN(my_registration)
//
// and is built with mosaic_add_plugin(NAME SOURCES ...) (cmake/MosaicPlugin.cmake). It links
// nothing of Mosaic's: the few non-inline functions it calls (Node::attr_*, Tensor::clone)
// resolve against the mosaic executable, which exports them. Everything registered is
// checked first and committed together: a plugin whose registration fails leaves nothing
// behind. Examples: examples/plugin_backend/, examples/plugin_custom_op/; docs/extending.md.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "core/kernel.hpp"
#include "ir/status.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

/// Bumped whenever a type a plugin sees changes meaning or layout (Kernel, KernelContext,
/// BackwardArgs, BackendInfo, KernelTraits, OpSchema, Tensor, Node). A plugin built against
/// another version is refused with a message that says so.
///   1: the first interface.
///   2: add_kernel takes KernelTraits (the layouts a kernel reads, a cheap support check).
///   3: fused_activation returns an Activation over the element-wise op table
///      (operators/eltwise.hpp: an optional UnaryOp and its UnaryArgs).
///   4: KernelContext::precision and BackendInfo::declines_precision (--precision bf16).
///   5: BackendInfo::properties (libraries, kernels, forced_by) replaces details.
///   6: BackendInfo::device and BackendInfo::unavailable (backends computing in a device's
///      memory, ir/device.hpp; backends that cannot run on this machine).
///   7: Device timing markers (Device::timing, mark, elapsed_ns), Device::memory,
///      Device::measure_peaks, Device::sample and Precision::kTF32.
///   8: training on a device: Kernel::updates_input, Device::zero, accumulate, trains,
///      optimizer_step (OptimizerRule) and class_loss (LossRule). New virtual functions move
///      the vtables a plugin's kernels and devices are built with, which the sizes below
///      do not see.
#define MOSAIC_PLUGIN_API_VERSION 8

namespace mosaic {

/// Sizes of the types a plugin and Mosaic exchange, compared at load time as a second
/// guard: a plugin compiled against headers that changed without a version bump (or with
/// another standard library) is refused instead of crashing.
inline uint64_t plugin_abi_fingerprint() {
  const uint64_t sizes[] = {sizeof(KernelContext), sizeof(BackwardArgs), sizeof(BackendInfo), sizeof(OpSchema),
                            sizeof(Tensor),        sizeof(TensorDesc),   sizeof(Node),        sizeof(Status),
                            sizeof(KernelFactory), sizeof(std::string),  sizeof(KernelTraits), sizeof(Capability),
                            sizeof(Activation)};
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the sizes
  for (uint64_t s : sizes) h = (h ^ s) * 1099511628211ull;
  return h;
}

/// What a plugin registers through; Mosaic implements it. Each call returns an error for a
/// name already taken or a backend that does not exist; the plugin returns the first
/// error it gets (or its own) from its registration function, and then nothing it
/// registered is kept.
class PluginRegistrar {
 public:
  virtual ~PluginRegistrar() = default;
  /// A new backend, usable in --backends, --backend and --assign like a built-in.
  virtual Status add_backend(BackendInfo info) = 0;
  /// A kernel for op_type on `backend`, which is a registered backend or one this plugin
  /// added. op_type is an ONNX op, or one this plugin added with add_operator before: its
  /// kernel is then registered under the op's key (domain and op type, Node::op_key), never
  /// ONNX's op of the same name. A kernel the backend already has is an error (plugins add,
  /// they do not replace). `traits` says which of the backend's layouts it reads and how the planner
  /// asks, before building it, whether it takes a node (KernelTraits in core/kernel.hpp).
  virtual Status add_kernel(const std::string& backend, const std::string& op_type, KernelFactory factory,
                            KernelTraits traits) = 0;
  Status add_kernel(const std::string& backend, const std::string& op_type, KernelFactory factory) {
    return add_kernel(backend, op_type, std::move(factory), KernelTraits{});
  }
  /// A custom operator. `schema.domain` must be set and not the ONNX domain ("" or
  /// "ai.onnx") nor Mosaic's ("mosaic"); the domain and op type must not be an op another
  /// plugin already has (ONNX's op of the same name is another op);
  /// `infer` and `flops` are required. Register its reference kernels on "naive" with
  /// add_kernel: naive is the oracle every other backend is checked against, and the
  /// backend that runs nodes no other backend has a kernel for.
  virtual Status add_operator(OpSchema schema) = 0;
};

}  // namespace mosaic

/// Exports a plugin's entry points: its interface version, its ABI fingerprint, and the
/// registration function `Status fn(mosaic::PluginRegistrar&)`.
#define MOSAIC_PLUGIN(register_fn)                                                              \
  extern "C" int mosaic_plugin_api_version() { return MOSAIC_PLUGIN_API_VERSION; }              \
  extern "C" uint64_t mosaic_plugin_abi() { return ::mosaic::plugin_abi_fingerprint(); }        \
  extern "C" void mosaic_plugin_register(::mosaic::PluginRegistrar* r, ::mosaic::Status* st) { \
    try {                                                                                       \
      *st = register_fn(*r);                                                                    \
    } catch (const std::exception& e) {                                                         \
      *st = ::mosaic::Status::internal(std::string("registration threw: ") + e.what());         \
    }                                                                                           \
  }
