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

/// The backend's first BackendRegistration::Adapter: a kernel registered without a SupportCheck
/// reads plain layouts and takes float32 inputs only (constants of other types, such as
/// Clip's bounds or a Reshape's shape, are read on the host).
void float32_kernels(const std::string& op_type, KernelFactory& factory, KernelTraits& traits);
/// The second: a kernel that computes in float32 also takes float16 and bfloat16 nodes, widened
/// (core/promote.hpp's context; WidenedKernel: the 16-bit tensors widened and rounded back in
/// device memory, as naive widens them on the host), for inference only.
void widen_float16(const std::string& op_type, KernelFactory& factory, KernelTraits& traits);
/// Both, in that order: what the backend registers every kernel through.
void device_kernels(const std::string& op_type, KernelFactory& factory, KernelTraits& traits);
/// Each kernel family's kernels (gemm.cpp, eltwise.cpp, conv.cpp, pool_norm.cpp,
/// movement.cpp, quant.cpp), as every backend's.
void add_gemm_kernels(BackendRegistration& r);
void add_eltwise_kernels(BackendRegistration& r);
void add_conv_kernels(BackendRegistration& r);
void add_pool_norm_kernels(BackendRegistration& r);
void add_movement_kernels(BackendRegistration& r);
/// 8-bit codes and integer products (quant.cpp).
void add_quant_kernels(BackendRegistration& r);
/// The com.microsoft QOperator element-wise ops on codes (qlinear.cpp).
void add_qlinear_kernels(BackendRegistration& r);

/// The 16-bit float a plan's convolutions and products read: float16 for --precision fp16,
/// bfloat16 for bf16; none for f32 and tf32 (they read float32).
std::optional<Float16Kind> float16_kind(Precision p);
/// cuBLAS's name of the kind (CUDA_R_16F, CUDA_R_16BF), cuDNN's (CUDNN_DATA_HALF,
/// CUDNN_DATA_BFLOAT16) and ours ("fp16", "bf16").
cudaDataType_t cublas_type(Float16Kind kind);
cudnnDataType_t cudnn_type(Float16Kind kind);
const char* float16_name(Float16Kind kind);
/// The refusal of a training plan in fp16 or bf16 on cuda, naming the node (`label`): its
/// products compute in those for inference only.
Status float16_training_refused(const std::string& label, Float16Kind kind);

/// A float32 operand's 16-bit copy in device memory, which a product in fp16 or bf16 reads: a
/// constant's (weights) rounded once when the plan is built, on the host (ir/elements.hpp's
/// rounding to nearest even, the oracle's), any other's rounded on the device before each
/// product (launch_narrow, the same rounding).
class Float16Operand {
 public:
  /// Holds `n` elements of `kind`; `constant` (nullable) is the operand's float32 value, rounded
  /// and uploaded now.
  Status prepare(Float16Kind kind, int64_t n, const Tensor* constant);
  /// Queues rounding x into the copy on `stream` (nothing for a constant, whose x is unread).
  cudaError_t round(cudaStream_t stream, const float* x) const;
  void* data() const { return mem_.data(); }
  size_t bytes() const { return mem_.bytes(); }

 private:
  DeviceMemory mem_;
  Float16Kind kind_ = Float16Kind::kHalf;
  int64_t n_ = 0;
  bool constant_ = false;
};

}  // namespace mosaic::cuda_backend
