// The cuda backend as a bundled plugin (libmosaic_cuda.so, loaded when a command names
// cuda or all): GPU 0 through cuDNN, cuBLAS and the backend's own CUDA kernels, in the device's
// memory (BackendInfo::device). Without a usable GPU it stays registered and says why
// (BackendInfo::unavailable): naming it fails before any work, `all` leaves it out.
#include "backends/cuda/cuda_internal.hpp"

namespace mosaic::cuda_backend {
namespace {

Status register_cuda(Registrar& registrar) {
  const std::shared_ptr<CudaDevice>& device = CudaDevice::instance();
  // Every precision: float32, TF32, and float16 or bfloat16 operands of the convolutions and
  // products (inference; a training plan's kernels refuse those by name).
  BackendInfo info{"cuda",
                   "GPU 0 through cuDNN, cuBLAS (float32; TF32, fp16 or bf16 tensor-core math with --precision; int8 "
                   "products) and its own CUDA kernels, in device memory",
                   [device] { return device->properties(); }, [](Precision) { return std::string(); }};
  info.device = device;
  info.unavailable = [device] { return device->unavailable(); };
  BackendRegistration r(registrar, std::move(info));
  r.adapt(device_kernels);
  add_gemm_kernels(r);
  add_eltwise_kernels(r);
  add_conv_kernels(r);
  add_pool_norm_kernels(r);
  add_movement_kernels(r);
  add_quant_kernels(r);
  add_qlinear_kernels(r);
  return r.status();
}

}  // namespace
}  // namespace mosaic::cuda_backend

MOSAIC_PLUGIN(mosaic::cuda_backend::register_cuda)
