// What the cuda backend's host-side files share beyond cuda_backend.hpp (which eltwise.cu
// also includes): registration helpers and the mapping of Mosaic's element-wise ops.
#pragma once

#include <optional>
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/device_unary.hpp"
#include "backends/plugin.hpp"
#include "operators/eltwise.hpp"

namespace mosaic::cuda_backend {

/// The device form of a node's fused activation (the fusion pass), kNone without one, or
/// kUnsupported naming the activation the device lacks.
Expected<DevUnaryArgs> device_activation(const Node& node, const std::string& label);

/// The backend's BackendRegistration::Adapter: a kernel registered without a SupportCheck
/// reads plain layouts and takes float32 inputs only (constants of other types, such as
/// Clip's bounds or a Reshape's shape, are read on the host).
void float32_kernels(const std::string& op_type, KernelFactory& factory, KernelTraits& traits);
/// Each kernel family's kernels (gemm.cpp, eltwise.cpp, conv.cpp, pool_norm.cpp,
/// movement.cpp, quant.cpp), as every backend's.
void add_gemm_kernels(BackendRegistration& r);
void add_eltwise_kernels(BackendRegistration& r);
void add_conv_kernels(BackendRegistration& r);
void add_pool_norm_kernels(BackendRegistration& r);
void add_movement_kernels(BackendRegistration& r);
/// 8-bit codes and integer products (quant.cpp).
void add_quant_kernels(BackendRegistration& r);

}  // namespace mosaic::cuda_backend
