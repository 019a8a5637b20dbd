// The cuda backend's shared pieces: the device (cuda:0) with its stream and cuBLAS handle,
// the kernel base class, and the launchers of the element-wise CUDA kernels (eltwise.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/kernel.hpp"

namespace mosaic::cuda_backend {

/// "cudaErrorMemoryAllocation: out of memory"-style text of a CUDA runtime or cuBLAS error.
std::string cuda_error(cudaError_t e);
std::string cublas_error(cublasStatus_t s);
std::string cudnn_error(cudnnStatus_t s);

/// GPU 0 of this process: memory, copies and synchronisation on one stream, on which every
/// kernel of the backend is queued (so a copy after a kernel waits for it), with the cuBLAS
/// and cuDNN handles bound to that stream.
class CudaDevice final : public Device {
 public:
  /// The one instance (the backend's BackendInfo::device).
  static const std::shared_ptr<CudaDevice>& instance();
  std::string name() const override { return "cuda:0"; }
  Expected<void*> allocate(size_t bytes) override;
  void release(void* data) noexcept override;
  Status copy_to_device(void* device_dst, const void* host_src, size_t bytes) override;
  Status copy_to_host(void* host_dst, const void* device_src, size_t bytes) override;
  Status synchronize() override;
  /// Device-side timing by CUDA events recorded on the stream (0.5 us resolution).
  bool timing(size_t markers) override;
  Status mark(size_t marker) override;
  Expected<int64_t> elapsed_ns(size_t from, size_t to) override;
  Expected<MemoryInfo> memory() override;
  /// cublasSgemm at 8192^3 (float32, default math), a copy within the device and copies from
  /// and to pageable host memory, each the best of 5 timed runs after a warm-up.
  Expected<Peaks> measure_peaks() override;
  /// Through NVML where the driver has it (nvml.cpp): utilisation, clocks, power, temperature.
  std::vector<std::pair<std::string, double>> sample() override;
  bool pin(void* host, size_t bytes) override;
  void unpin(void* host) noexcept override;

  /// Why the backend cannot run here ("" when GPU 0 answers); asked of the runtime once.
  const std::string& unavailable();
  /// The stream and the cuBLAS and cuDNN handles, made at the first call (no GPU is touched
  /// before).
  Status ensure_ready();
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  /// The GPU, the driver and the libraries, for provenance and `mosaic backends`.
  BackendProperties properties();

 private:
  std::once_flag probed_, ready_;
  std::string unavailable_, ready_error_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::mutex events_mu_;
  std::vector<cudaEvent_t> events_;  // timing markers, made as runs need them (kept for the process)
};

/// Device memory a kernel owns (a library's workspace), freed with it.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { CudaDevice::instance()->release(data_); }
  /// Holds `bytes` (zeroed) from now on; what it held before is freed. 0 bytes: none.
  Status resize(size_t bytes);
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

/// What every kernel of the backend shares: its label and the device being ready (that it
/// computes in float32 is the support check `add` registers each kernel with).
class CudaKernel : public Kernel {
 protected:
  Status init_base(const KernelContext& ctx);
  /// A launch's or library call's error as this node's error.
  Status check(cudaError_t e, const char* what) const;
  Status check(cublasStatus_t s, const char* what) const;
  Status check(cudnnStatus_t s, const char* what) const;
  CudaDevice& device() const { return *CudaDevice::instance(); }
  std::string label_;
};

// ---- element-wise launchers (eltwise.cu); each queues one kernel on `stream` ----

/// The element-wise functions the device computes, with their parameters (operators/eltwise.hpp's
/// UnaryArgs). kNone: the identity (no fused activation).
enum class DevUnary : int {
  kNone, kRelu, kLeakyRelu, kSigmoid, kTanh, kClip, kExp, kLog, kSqrt, kErf, kNeg, kAbs, kReciprocal,
  kSoftplus, kSoftsign, kElu, kSelu, kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kSin, kCos
};
struct DevUnaryArgs {
  DevUnary op = DevUnary::kNone;
  float alpha = 0, beta = 0, gamma = 0, lo = 0, hi = 0;
};
/// y[i] = f(x[i]) for i < n (x and y may be the same).
cudaError_t launch_unary(cudaStream_t stream, const DevUnaryArgs& f, const float* x, float* y, int64_t n);

/// Shapes of a broadcast binary op, right-aligned to `rank` <= 6 dimensions: the output's,
/// and each operand's strides (0 along the dimensions it is broadcast over).
struct Broadcast {
  int rank = 0;
  int64_t dims[6] = {};
  int64_t a_strides[6] = {}, b_strides[6] = {};
};
enum class DevBinary : int { kAdd, kSub, kMul, kDiv };
/// y = a OP b over `n` output elements, then `f` applied.
cudaError_t launch_binary(cudaStream_t stream, DevBinary op, const Broadcast& shape, const float* a, const float* b,
                          float* y, int64_t n, const DevUnaryArgs& f);
/// y[m, n] = c broadcast: c[i * row_stride + j * col_stride].
cudaError_t launch_broadcast_rows(cudaStream_t stream, const float* c, int64_t row_stride, int64_t col_stride, float* y,
                                  int64_t m, int64_t n);

// ---- data movement and reductions (movement.cu) ----

/// Output element o of a copy over up to 8 axes reads input element sum_d maps[d][o_d] *
/// strides[d], where o_d is o's index along output axis d; maps[d] (device memory) is nullptr
/// for the identity, and an entry of -1 writes the fill value (*fill_device where it is not
/// nullptr: a run-time input). Pad and Slice are such per-axis maps, Transpose permuted strides.
struct AxisGather {
  int rank = 0;
  int64_t out_dims[8] = {};
  int64_t strides[8] = {};
  const int64_t* maps[8] = {};
};
cudaError_t launch_axis_gather(cudaStream_t stream, const AxisGather& g, const float* x, float* y, int64_t n, float fill,
                               const float* fill_device);

/// The reductions of operators/reduce.hpp the device computes, in their rows' order.
enum class DevReduce : int { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };
/// Output element o (over the kept axes, `out_dims`, with `kept_strides` into the input)
/// reduces the `count` input elements of the reduced axes (`red_dims`, `red_strides`), in
/// double precision.
struct ReduceGeometry {
  int kept_rank = 0, red_rank = 0;
  int64_t out_dims[8] = {}, kept_strides[8] = {};
  int64_t red_dims[8] = {}, red_strides[8] = {};
  int64_t count = 1;
};
cudaError_t launch_reduce(cudaStream_t stream, DevReduce op, const ReduceGeometry& g, const float* x, float* y,
                          int64_t n_out);

/// LayerNormalization of `rows` rows of `cols` elements (layer_norm.cu): each row's mean and
/// variance (two passes), then y = (x - mean) / sqrt(var + epsilon) * scale[j] (+ bias[j]
/// where bias is not nullptr).
cudaError_t launch_layer_norm(cudaStream_t stream, const float* x, const float* scale, const float* bias, float* y,
                              int64_t rows, int64_t cols, float epsilon);

}  // namespace mosaic::cuda_backend
