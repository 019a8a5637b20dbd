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

/// Registers one float32 kernel on "cuda" unless an earlier registration failed (`st` keeps
/// the first error).
void add(PluginRegistrar& r, Status& st, const std::string& op, KernelFactory factory);
/// Each kernel family's registrations (gemm.cpp, eltwise.cpp, conv.cpp, pool_norm.cpp,
/// movement.cpp).
void add_gemm_kernels(PluginRegistrar& r, Status& st);
void add_eltwise_kernels(PluginRegistrar& r, Status& st);
void add_conv_kernels(PluginRegistrar& r, Status& st);
void add_pool_norm_kernels(PluginRegistrar& r, Status& st);
void add_movement_kernels(PluginRegistrar& r, Status& st);

}  // namespace mosaic::cuda_backend
