// The operator/backend plugin interface: what a shared library loaded with `--plugin
// lib.so` registers through. A plugin can
//   - add a backend (BackendInfo) and its kernels,
//   - add kernels for ONNX ops to an existing backend (a built-in one or another plugin's),
//   - add a custom-domain operator: its schema (arity, shape inference, forward and backward
//     FLOPs) and, registered on the "naive" backend, its reference forward and backward.
// Plugin kernels take part in placement, the check against naive, gradcheck and
// benchmarking exactly as built-in kernels do: they go into the same registry.
//
// A plugin includes this header (and the core headers it pulls in), defines its registration
// function as every backend does, built-ins included (core/registration.hpp):
//
//   mosaic::Status register_mine(mosaic::Registrar& registrar) {
//     mosaic::BackendRegistration r(registrar, {"mine", "what it computes with", nullptr, nullptr});
//     r.kernel("Gemm", mosaic::make_factory<MyGemm>());
//     return r.status();
//   }
//   MOSAIC_PLUGIN(register_mine)
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
#include "core/registration.hpp"
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
///   9: one registration idiom for every backend: PluginRegistrar is core/registration.hpp's
///      Registrar, with registry() (the registry plans are built from), and
///      BackendRegistration chains a plugin's kernels as it does the built-ins'.
///  10: Precision::kF16 (a plugin built before it would take fp16 plans for float32 ones).
///  11: Kernel::widened_from (a new virtual function).
#define MOSAIC_PLUGIN_API_VERSION 11

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

}  // namespace mosaic

/// Exports a plugin's entry points: its interface version, its ABI fingerprint, and the
/// registration function `Status fn(mosaic::Registrar&)`.
#define MOSAIC_PLUGIN(register_fn)                                                              \
  extern "C" int mosaic_plugin_api_version() { return MOSAIC_PLUGIN_API_VERSION; }              \
  extern "C" uint64_t mosaic_plugin_abi() { return ::mosaic::plugin_abi_fingerprint(); }        \
  extern "C" void mosaic_plugin_register(::mosaic::Registrar* r, ::mosaic::Status* st) { \
    try {                                                                                       \
      *st = register_fn(*r);                                                                    \
    } catch (const std::exception& e) {                                                         \
      *st = ::mosaic::Status::internal(std::string("registration threw: ") + e.what());         \
    }                                                                                           \
  }
