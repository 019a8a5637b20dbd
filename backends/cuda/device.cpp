// cuda:0 as a Device: memory, copies and waits on the backend's stream; whether a GPU is
// here at all; what provenance says of the GPU, the driver and the libraries.
#include <cstdlib>
#include <functional>

#include <string>

#include "backends/cuda/cuda_backend.hpp"

namespace mosaic::cuda_backend {

std::string cuda_error(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

std::string cublas_error(cublasStatus_t s) {
  return std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s);
}

std::string cudnn_error(cudnnStatus_t s) { return cudnnGetErrorString(s); }

const std::shared_ptr<CudaDevice>& CudaDevice::instance() {
  static const std::shared_ptr<CudaDevice> device = std::make_shared<CudaDevice>();
  return device;
}

const std::string& CudaDevice::unavailable() {
  std::call_once(probed_, [this] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) unavailable_ = "no usable CUDA device (" + cuda_error(e) + ")";
    else if (count == 0) unavailable_ = "no CUDA device";
  });
  return unavailable_;
}

Status CudaDevice::ensure_ready() {
  std::call_once(ready_, [this] {
    if (!unavailable().empty()) {
      ready_error_ = unavailable();
      return;
    }
    cudaError_t e = cudaSetDevice(0);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      ready_error_ = "cuda:0: " + cuda_error(e);
      return;
    }
    cublasStatus_t s = cublasCreate(&cublas_);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(cublas_, stream_);
    if (s != CUBLAS_STATUS_SUCCESS) {
      ready_error_ = "cuBLAS on cuda:0: " + cublas_error(s);
      return;
    }
    // cuDNN's math type is each convolution's (conv.cpp: FMA only, no TF32).
    cudnnStatus_t d = cudnnCreate(&cudnn_);
    if (d == CUDNN_STATUS_SUCCESS) d = cudnnSetStream(cudnn_, stream_);
    if (d != CUDNN_STATUS_SUCCESS) ready_error_ = "cuDNN on cuda:0: " + cudnn_error(d);
  });
  return ready_error_.empty() ? Status::ok() : Status::unsupported(ready_error_);
}

Expected<void*> CudaDevice::allocate(size_t bytes) {
  MOSAIC_RETURN_IF_ERROR(ensure_ready());
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return Status::unsupported("out of device memory on cuda:0: " + std::to_string(bytes) + " bytes asked for, " +
                               std::to_string(free_bytes) + " of " + std::to_string(total) + " free (" + cuda_error(e) +
                               ")");
  }
  e = cudaMemsetAsync(p, 0, bytes, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    cudaFree(p);
    return Status::internal("cuda:0: zeroing " + std::to_string(bytes) + " bytes: " + cuda_error(e));
  }
  return p;
}

void CudaDevice::release(void* data) noexcept {
  if (data) cudaFree(data);
}

Status CudaDevice::copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  cudaError_t e = cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  return e == cudaSuccess ? Status::ok()
                          : Status::internal("copying " + std::to_string(bytes) + " bytes to cuda:0: " + cuda_error(e));
}

Status CudaDevice::copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  cudaError_t e = cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  return e == cudaSuccess ? Status::ok()
                          : Status::internal("copying " + std::to_string(bytes) + " bytes from cuda:0: " + cuda_error(e));
}

bool CudaDevice::pin(void* host, size_t bytes) {
  if (!host || !bytes || !ensure_ready().is_ok()) return false;
  if (cudaHostRegister(host, bytes, cudaHostRegisterDefault) == cudaSuccess) return true;
  cudaGetLastError();  // already registered, or not allowed: the copies stay pageable
  return false;
}

void CudaDevice::unpin(void* host) noexcept {
  if (host && cudaHostUnregister(host) != cudaSuccess) cudaGetLastError();
}

Status CudaDevice::synchronize() {
  if (!stream_) return Status::ok();
  const cudaError_t e = cudaStreamSynchronize(stream_);
  return e == cudaSuccess ? Status::ok() : Status::internal("cuda:0: " + cuda_error(e));
}

Status CudaDevice::zero(void* device_dst, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(device_dst, 0, bytes, stream_);
  return e == cudaSuccess ? Status::ok() : Status::internal("cuda:0: zeroing " + std::to_string(bytes) + " bytes: " + cuda_error(e));
}

Status CudaDevice::accumulate(float* device_dst, const float* device_src, int64_t n) {
  const cudaError_t e = launch_accumulate(stream_, device_dst, device_src, n);
  return e == cudaSuccess ? Status::ok()
                          : Status::internal("cuda:0: adding " + std::to_string(n) + " gradient elements: " + cuda_error(e));
}

Status CudaDevice::optimizer_step(const OptimizerRule& r, float* p, const float* g, float* s0, float* s1, int64_t n) {
  const cudaError_t e = launch_optimizer_step(stream_, r, p, g, s0, s1, n);
  return e == cudaSuccess ? Status::ok()
                          : Status::internal("cuda:0: an optimizer step of " + std::to_string(n) + " parameters: " +
                                             cuda_error(e));
}

Status CudaDevice::class_loss(const LossRule& rule, const float* logits, const int64_t* labels, float* dlogits,
                              double* row_loss, int32_t* row_hit) {
  const cudaError_t e = launch_class_loss(stream_, rule, logits, labels, dlogits, row_loss, row_hit);
  return e == cudaSuccess ? Status::ok()
                          : Status::internal("cuda:0: the loss over " + std::to_string(rule.rows) + " rows: " + cuda_error(e));
}

bool CudaDevice::timing(size_t markers) {
  if (!ensure_ready().is_ok()) return false;
  std::lock_guard<std::mutex> lock(events_mu_);
  while (events_.size() < markers) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) return false;  // host times its steps instead
    events_.push_back(e);
  }
  return true;
}

Status CudaDevice::mark(size_t marker) {
  std::lock_guard<std::mutex> lock(events_mu_);
  if (marker >= events_.size()) return Status::internal("cuda:0: timing marker " + std::to_string(marker) + " was not made");
  const cudaError_t e = cudaEventRecord(events_[marker], stream_);
  return e == cudaSuccess ? Status::ok() : Status::internal("cuda:0: recording a timing event: " + cuda_error(e));
}

Expected<int64_t> CudaDevice::elapsed_ns(size_t from, size_t to) {
  std::lock_guard<std::mutex> lock(events_mu_);
  if (from >= events_.size() || to >= events_.size()) return Status::internal("cuda:0: no such timing marker");
  float ms = 0.f;
  const cudaError_t e = cudaEventElapsedTime(&ms, events_[from], events_[to]);
  if (e != cudaSuccess) return Status::internal("cuda:0: reading a timing event: " + cuda_error(e));
  return static_cast<int64_t>(static_cast<double>(ms) * 1e6);
}

Expected<Device::MemoryInfo> CudaDevice::memory() {
  MOSAIC_RETURN_IF_ERROR(ensure_ready());
  size_t free_bytes = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free_bytes, &total);
  if (e != cudaSuccess) return Status::internal("cuda:0: reading its memory: " + cuda_error(e));
  return MemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total)};
}

Expected<Device::Peaks> CudaDevice::measure_peaks() {
  MOSAIC_RETURN_IF_ERROR(ensure_ready());
  constexpr int n = 8192, kRuns = 6;  // the first run warms up
  const size_t bytes = size_t{n} * n * sizeof(float);
  void* m[3] = {nullptr, nullptr, nullptr};
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<char> host;
  auto release_all = [&] {
    for (void* p : m) cudaFree(p);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  };
  auto fail = [&](const std::string& what, cudaError_t e) {
    release_all();
    return Status::internal("cuda:0: measuring its peaks: " + what + ": " + cuda_error(e));
  };
  for (void*& p : m) {
    if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return fail("3 x 256 MiB", e);
    if (cudaError_t e = cudaMemsetAsync(p, 0, bytes, stream_); e != cudaSuccess) return fail("zeroing", e);
  }
  if (cudaError_t e = cudaEventCreate(&start); e != cudaSuccess) return fail("events", e);
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) return fail("events", e);
  // The best of the timed runs of `work`, in ms, on the stream's events.
  auto best_ms = [&](const std::function<cudaError_t()>& work, float* out) -> cudaError_t {
    float best = 0;
    for (int i = 0; i < kRuns; ++i) {
      cudaError_t e = cudaEventRecord(start, stream_);
      if (e == cudaSuccess) e = work();
      if (e == cudaSuccess) e = cudaEventRecord(stop, stream_);
      if (e == cudaSuccess) e = cudaEventSynchronize(stop);
      float ms = 0;
      if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, stop);
      if (e != cudaSuccess) return e;
      if (i > 0 && (best == 0 || ms < best)) best = ms;
    }
    *out = best;
    return cudaSuccess;
  };
  Peaks p;
  float ms = 0;
  cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH);
  const float one = 1.f, zero = 0.f;
  cublasStatus_t gemm_status = CUBLAS_STATUS_SUCCESS;
  cudaError_t e = best_ms(
      [&] {
        gemm_status = cublasSgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, static_cast<float*>(m[0]), n,
                                  static_cast<float*>(m[1]), n, &zero, static_cast<float*>(m[2]), n);
        return gemm_status == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
      },
      &ms);
  if (gemm_status != CUBLAS_STATUS_SUCCESS) {
    release_all();
    return Status::internal("cuda:0: measuring its peaks: cublasSgemm: " + cublas_error(gemm_status));
  }
  if (e != cudaSuccess) return fail("cublasSgemm", e);
  p.gflops = 2.0 * n * n * static_cast<double>(n) / (static_cast<double>(ms) * 1e6);
  e = best_ms([&] { return cudaMemcpyAsync(m[1], m[0], bytes, cudaMemcpyDeviceToDevice, stream_); }, &ms);
  if (e != cudaSuccess) return fail("a copy within the device", e);
  p.bandwidth_gbs = 2.0 * static_cast<double>(bytes) / (static_cast<double>(ms) * 1e6);  // read + written
  host.assign(bytes, 1);
  e = best_ms([&] { return cudaMemcpyAsync(m[0], host.data(), bytes, cudaMemcpyHostToDevice, stream_); }, &ms);
  if (e != cudaSuccess) return fail("a copy in", e);
  p.to_device_gbs = static_cast<double>(bytes) / (static_cast<double>(ms) * 1e6);
  e = best_ms([&] { return cudaMemcpyAsync(host.data(), m[0], bytes, cudaMemcpyDeviceToHost, stream_); }, &ms);
  if (e != cudaSuccess) return fail("a copy out", e);
  p.to_host_gbs = static_cast<double>(bytes) / (static_cast<double>(ms) * 1e6);
  release_all();
  p.how = "cublasSgemm 8192^3 float32, 256 MiB copied within the device, in and out of pageable host memory; best of 5";
  return p;
}

BackendProperties CudaDevice::properties() {
  BackendProperties p;
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  p.libraries.emplace_back("CUDA runtime", version(runtime));
  p.libraries.emplace_back("CUDA driver", driver ? version(driver) : "none");
  const size_t cudnn = cudnnGetVersion();
  p.libraries.emplace_back("cuDNN", std::to_string(cudnn / 10000) + "." + std::to_string(cudnn % 10000 / 100) + "." +
                                        std::to_string(cudnn % 100));
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  p.libraries.emplace_back("cuBLAS", std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch));
  if (unavailable().empty()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      p.kernels.emplace_back("gpu", prop.name);
      p.kernels.emplace_back("compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
      p.kernels.emplace_back("memory", std::to_string(prop.totalGlobalMem >> 20) + " MiB");
    }
  }
  p.kernels.emplace_back("math", "float32 (TF32, fp16 or bf16 tensor cores only with --precision)");
  if (std::getenv("CUDA_VISIBLE_DEVICES")) p.forced_by.push_back("CUDA_VISIBLE_DEVICES");
  if (std::getenv("NVIDIA_TF32_OVERRIDE")) p.forced_by.push_back("NVIDIA_TF32_OVERRIDE");
  return p;
}

Status DeviceMemory::resize(size_t bytes) {
  CudaDevice::instance()->release(data_);
  data_ = nullptr;
  bytes_ = 0;
  if (bytes == 0) return Status::ok();
  MOSAIC_ASSIGN_OR_RETURN(data_, CudaDevice::instance()->allocate(bytes));
  bytes_ = bytes;
  return Status::ok();
}

Status CudaKernel::init_base(const KernelContext& ctx) {
  label_ = ctx.node->label();  // float32 only: the support check every kernel is registered with (add)
  return device().ensure_ready();
}

Status CudaKernel::check(cudaError_t e, const char* what) const {
  return e == cudaSuccess ? Status::ok() : Status::internal(label_ + ": " + what + ": " + cuda_error(e));
}

Status CudaKernel::check(cublasStatus_t s, const char* what) const {
  return s == CUBLAS_STATUS_SUCCESS ? Status::ok() : Status::internal(label_ + ": " + what + ": " + cublas_error(s));
}

Status CudaKernel::check(cudnnStatus_t s, const char* what) const {
  return s == CUDNN_STATUS_SUCCESS ? Status::ok() : Status::internal(label_ + ": " + what + ": " + cudnn_error(s));
}

Status CudaKernel::zero_grads_from(const BackwardArgs& a, size_t first) const {
  for (size_t i = first; i < a.diff_src.size(); ++i)
    if (a.diff_src[i]) MOSAIC_RETURN_IF_ERROR(check(cudaMemsetAsync(a.diff_src[i]->data(), 0, a.diff_src[i]->bytes(),
                                                                    device().stream()),
                                                    "zeroing a gradient"));
  return Status::ok();
}

}  // namespace mosaic::cuda_backend
