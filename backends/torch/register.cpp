// The torch backend's registration and the kernel base shared by its families.
#include <cstdlib>
#include <ATen/Parallel.h>
#include <omp.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <exception>

#include "backends/torch/torch_kernel.hpp"
#include "core/promote.hpp"

namespace mosaic::torch_backend {

static void follow_thread_count(int threads) {
  // ATen's first parallel call on a thread sets OpenMP's thread count to its own default
  // (the physical cores cpuinfo reports, 1 on some VMs). That count is the calling thread's
  // OpenMP setting, so it would silently apply to every other backend as well: set it up
  // front, then put Mosaic's count (--threads) back.
  at::internal::lazy_init_num_threads();
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

Status TorchKernel::init_base(const KernelContext& ctx, size_t float_inputs, bool float_outputs) {
  label_ = ctx.node->label();
  training_ = ctx.training;
  threads_ = omp_get_max_threads();
  for (size_t i = 0; i < std::min(ctx.inputs.size(), float_inputs); ++i)
    if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32)
      return Status::unsupported(label_ + ": the torch backend computes float32 only (input " + std::to_string(i) + ")");
  for (size_t i = 0; i < ctx.outputs.size() && float_outputs; ++i)
    if (ctx.has_output(i) && ctx.outputs[i].dtype != DType::kF32)
      return Status::unsupported(label_ + ": the torch backend computes float32 only (output " + std::to_string(i) + ")");
  return Status::ok();
}

template <class F>
Status TorchKernel::guarded(const char* stage, F&& f) {
  try {
    follow_thread_count(threads_);
    f();
    return Status::ok();
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const size_t nl = what.find('\n'); nl != std::string::npos) what.resize(nl);  // drop ATen's backtrace
    return Status::internal(label_ + ": torch " + stage + ": " + what);
  }
}

Status TorchKernel::forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) {
  return guarded("forward", [&] { run_forward(src, dst); });
}

Status TorchKernel::backward(const BackwardArgs& a) {
  return guarded("backward", [&] { run_backward(a); });
}

void TorchKernel::run_backward(const BackwardArgs&) { throw std::logic_error("this kernel has no backward"); }

at::Tensor reduce_to(const at::Tensor& g, const Shape& shape) {
  if (g.sizes().vec() == shape) return g;
  return g.sum_to_size(at::IntArrayRef(shape)).reshape(at::IntArrayRef(shape));
}

void write(const at::Tensor& value, Tensor* into) {
  at::Tensor out = view(into);
  out.copy_(value.reshape(out.sizes()));
}

namespace {

BackendProperties properties() {
  follow_thread_count(omp_get_max_threads());
  std::string capability;
  const std::string config = at::show_config();
  const std::string key = "CPU capability usage: ";
  if (const size_t p = config.find(key); p != std::string::npos)
    capability = config.substr(p + key.size(), config.find('\n', p) - p - key.size());
  BackendProperties p;
  p.libraries = {{"PyTorch", TORCH_VERSION},
                 {"ATen", std::string(at::hasMKLDNN() ? "oneDNN (MKL-DNN) enabled" : "without oneDNN") + ", " +
                              std::to_string(at::get_num_threads()) + " threads"}};
  p.kernels = {{"cpu_capability", capability.empty() ? std::string("unknown") : capability}};
  if (std::getenv("ATEN_CPU_CAPABILITY")) p.forced_by.push_back("ATEN_CPU_CAPABILITY");
  return p;
}

Status register_torch(Registrar& registrar) {
  follow_thread_count(omp_get_max_threads());
  BackendRegistration r(registrar, {kName, "PyTorch's ATen kernels (libtorch) forward and backward, zero-copy on Mosaic's buffers",
                                    properties, nullptr});
  r.adapt(promote_float16);  // float16 and bfloat16 nodes widened on the host, as naive's
  add_conv_gemm_kernels(r);
  add_pool_kernels(r);
  add_eltwise_kernels(r);
  add_norm_movement_kernels(r);
  add_reduce_kernels(r);
  add_layer_norm_kernels(r);
  add_rnn_kernels(r);
  add_index_kernels(r);
  return r.status();
}

}  // namespace
}  // namespace mosaic::torch_backend

MOSAIC_PLUGIN(mosaic::torch_backend::register_torch)
