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

#include "backends/cuda/device_math.hpp"
#include "backends/cuda/device_qlinear.hpp"
#include "backends/cuda/device_quant.hpp"
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
  /// Training plans keep gradients here: cudaMemsetAsync and an addition kernel, queued on
  /// the stream.
  Status zero(void* device_dst, size_t bytes) override;
  Status accumulate(float* device_dst, const float* device_src, int64_t n) override;
  bool trains() const override { return true; }
  /// SGD (momentum, Nesterov) and Adam/AdamW on a resident parameter: one kernel on the stream.
  Status optimizer_step(const OptimizerRule& rule, float* p, const float* g, float* s0, float* s1, int64_t n) override;
  /// Softmax cross-entropy and the one-hot squared error: one kernel on the stream (loss.cu).
  Status class_loss(const LossRule& rule, const float* logits, const int64_t* labels, float* dlogits, double* row_loss,
                    int32_t* row_hit) override;

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
  /// The gradient backward must write for input i (device memory), nullptr where none is asked.
  static float* grad_of(const BackwardArgs& a, size_t i) {
    return i < a.diff_src.size() && a.diff_src[i] ? a.diff_src[i]->f32() : nullptr;
  }
  /// Queues zeroing the gradients asked for of inputs `first` .. the last (inputs the output
  /// does not depend on: a training BatchNormalization's running statistics).
  Status zero_grads_from(const BackwardArgs& a, size_t first) const;
  std::string label_;
};

// ---- element-wise launchers (eltwise.cu); each queues one kernel on `stream` ----

/// y[i] = f(x[i]) for i < n (x and y may be the same).
cudaError_t launch_unary(cudaStream_t stream, const DevUnaryArgs& f, const float* x, float* y, int64_t n);

/// y = a OP b over `n` output elements, then `f` applied.
cudaError_t launch_binary(cudaStream_t stream, DevBinary op, const Broadcast& shape, const float* a, const float* b,
                          float* y, int64_t n, const DevUnaryArgs& f);
/// y[m, n] = c broadcast: c[i * row_stride + j * col_stride].
cudaError_t launch_broadcast_rows(cudaStream_t stream, const float* c, int64_t row_stride, int64_t col_stride, float* y,
                                  int64_t m, int64_t n);

/// The 16-bit float a plan's products read in --precision fp16 or bf16 (Precision).
enum class Float16Kind { kHalf, kBfloat16 };
/// y[i] = x[i] rounded to float16 or bfloat16 to nearest even (CUDA's conversions: overflow
/// to infinity, NaN kept), stored as its 16 bits, for i < n.
cudaError_t launch_narrow(cudaStream_t stream, Float16Kind kind, const float* x, uint16_t* y, int64_t n);
/// y[i] = the float16 or bfloat16 x[i] as a float (exact), for i < n.
cudaError_t launch_widen(cudaStream_t stream, Float16Kind kind, const uint16_t* x, float* y, int64_t n);

// ---- gradients (eltwise.cu) ----

/// dx[i] = dy[i] * f'(x[i], y[i]) for i < n; x or y may be nullptr where f' does not read it
/// (dev_derivative_reads_input/output).
cudaError_t launch_unary_backward(cudaStream_t stream, const DevUnaryArgs& f, const float* x, const float* y,
                                  const float* dy, float* dx, int64_t n);
/// Both gradients of `a OP b` where a, b and y have one shape (nothing broadcast), in one pass:
/// da[i] = dev_binary_grad(op, 0, dy[i], a[i], b[i]) and db[i] likewise with 1, for i < n; da
/// or db may be nullptr (not asked for), a and b where the op's gradient does not read them.
cudaError_t launch_binary_backward_same(cudaStream_t stream, DevBinary op, const float* dy, const float* a,
                                        const float* b, float* da, float* db, int64_t n);
/// out[o] = scale * sum over r < g.count of grad_reduce_term(op, which, g, o, r, ...) for
/// o < g.elements: an operand's gradient summed over the dimensions it was broadcast along (a
/// block of threads per element where there are many terms, a thread per element where few).
cudaError_t launch_grad_reduce(cudaStream_t stream, DevBinary op, int which, const GradReduce& g, const float* dy,
                               const float* a, const float* b, float* out, float scale);
/// dst[i] += src[i] for i < n (a gradient's contributions added where it lives).
cudaError_t launch_accumulate(cudaStream_t stream, float* dst, const float* src, int64_t n);
/// dev_optimizer_update on each of the n elements of p (with g, s0, s1; s0 and s1 may be
/// nullptr where the rule keeps no state).
cudaError_t launch_optimizer_step(cudaStream_t stream, const OptimizerRule& o, float* p, const float* g, float* s0,
                                  float* s1, int64_t n);

/// Device::class_loss's rows (loss.cu): a block per row.
cudaError_t launch_class_loss(cudaStream_t stream, const LossRule& rule, const float* logits, const int64_t* labels,
                              float* dlogits, double* row_loss, int32_t* row_hit);

// ---- data movement and reductions (movement.cu) ----

/// y[i] = x[axis_gather_offset(g, i)] for i < n (device_math.hpp), the fill value where that
/// is -1 (*fill_device where it is not nullptr: a run-time input).
cudaError_t launch_axis_gather(cudaStream_t stream, const AxisGather& g, const float* x, float* y, int64_t n, float fill,
                               const float* fill_device);
/// An AxisGather whose index maps live in device memory, uploaded once (movement.cpp): Pad,
/// Slice and Transpose, and the explicit padding of a convolution cuDNN cannot pad.
class DeviceGather {
 public:
  /// Output axes `out` (at most 8), each reading input stride `strides[d]` through `maps[d]`
  /// (absent or empty: the identity); `label` names the node in an error.
  Status set(const Shape& out, const std::vector<int64_t>& strides, const std::vector<std::vector<int64_t>>& maps,
             const std::string& label);
  /// y (the output's elements) from x; positions mapped to -1 take `fill` (*fill_device
  /// where it is not nullptr).
  cudaError_t run(cudaStream_t stream, const float* x, float* y, float fill = 0.f,
                  const float* fill_device = nullptr) const;
  size_t bytes() const { return maps_.bytes(); }

 private:
  AxisGather g_;
  int64_t elements_ = 0;
  DeviceMemory maps_;
};

cudaError_t launch_reduce(cudaStream_t stream, DevReduce op, const ReduceGeometry& g, const float* x, float* y,
                          int64_t n_out);
/// y[o] = data[gather_offset(g, indices, o)] for the outer * count * inner output elements;
/// an index outside the axis writes 0 and lowers *first_bad (device memory, set to INT64_MAX
/// before) to its position.
cudaError_t launch_gather(cudaStream_t stream, const GatherGeometry& g, const float* data, const int64_t* indices,
                          float* y, unsigned long long* first_bad);
/// Its backward: ddata (zeroed first) += dy at each element's source (atomic adds: rows
/// gathered twice add up in no fixed order).
cudaError_t launch_gather_backward(cudaStream_t stream, const GatherGeometry& g, const int64_t* indices,
                                   const float* dy, float* ddata, int64_t data_elements);
/// dx[i] = axis_scatter_at(s, i, dy) for i < n: Pad's and Slice's backward.
cudaError_t launch_axis_scatter(cudaStream_t stream, const AxisScatter& s, const float* dy, float* dx, int64_t n);
/// A reduction's backward over its n_in input elements (`back` maps each to its output);
/// `stats` is device scratch of 2 * n_out doubles where the rule reads the group
/// (dev_reduce_stats: Max, Min, Prod), else nullptr; x and y may be nullptr where the rule
/// reads neither (Sum, Mean).
cudaError_t launch_reduce_backward(cudaStream_t stream, DevReduce op, const ReduceGeometry& g, const ReduceBack& back,
                                   const float* x, const float* y, const float* dy, double* stats, float* dx,
                                   int64_t n_in, int64_t n_out);

/// LayerNormalization of `rows` rows of `cols` elements (layer_norm.cu): each row's mean and
/// variance (two passes), then y = (x - mean) / sqrt(var + epsilon) * scale[j] (+ bias[j]
/// where bias is not nullptr).
cudaError_t launch_layer_norm(cudaStream_t stream, const float* x, const float* scale, const float* bias, float* y,
                              int64_t rows, int64_t cols, float epsilon);
/// Device scratch, in floats, that launch_layer_norm_backward needs: each row's mean and
/// inverse deviation, and the chunks' partial sums of dscale and dbias.
inline int64_t layer_norm_backward_scratch_floats(int64_t rows, int64_t cols) {
  return 2 * rows + 2 * layer_norm_chunks(rows).chunks * cols;
}
/// Its gradients: dx (rows x cols), dscale and dbias (cols), each nullptr where not asked for;
/// `stats` is device scratch of layer_norm_backward_scratch_floats(rows, cols) floats.
cudaError_t launch_layer_norm_backward(cudaStream_t stream, const float* x, const float* scale, const float* dy,
                                       float* dx, float* dscale, float* dbias, float* stats, int64_t rows, int64_t cols,
                                       float epsilon);

// ---- 8-bit codes and integer products (quant.cu; the formulas: device_quant.hpp) ----

/// QuantizeLinear of n float32 values into uint8 or int8 codes (y_signed), scale and zero
/// point per tensor (axis_dim 1) or per axis; zero_points may be nullptr (zero).
cudaError_t launch_quantize(cudaStream_t stream, const float* x, uint8_t* y, int64_t n, const float* scales,
                            const uint8_t* zero_points, int64_t axis_dim, int64_t inner, bool y_signed);
/// DequantizeLinear of n uint8 or int8 codes (x_signed) to float32, likewise.
cudaError_t launch_dequantize(cudaStream_t stream, const uint8_t* x, float* y, int64_t n, const float* scales,
                              const uint8_t* zero_points, int64_t axis_dim, int64_t inner, bool x_signed);
/// DynamicQuantizeLinear of n float32 values: their range with 0 (NaN passed over), then the
/// scale and zero point (dev_dynamic_params) into `params` (device scratch: a float and a
/// byte after it) and into scale_out and zp_out where given, then the codes. `partials`:
/// device scratch of 2 * dynamic_range_blocks(n) floats.
cudaError_t launch_dynamic_quantize(cudaStream_t stream, const float* x, uint8_t* y, int64_t n, float* partials,
                                    void* params, float* scale_out, uint8_t* zp_out);
int dynamic_range_blocks(int64_t n);
/// CodeLookup: y[i] = table[(uint8)(x[i] + offset)] over n bytes.
cudaError_t launch_code_lookup(cudaStream_t stream, const uint8_t* x, const uint8_t* table, uint8_t* y, int64_t n,
                               uint8_t offset);
/// A matrix product's A packed for cuBLAS (dev_row_pack_at): rows * kp bytes.
cudaError_t launch_row_pack(cudaStream_t stream, const RowPack& p, const uint8_t* a, int8_t* packed);
/// A convolution's columns gathered for cuBLAS (dev_conv_pack_at): groups * rows * kp bytes.
cudaError_t launch_conv_pack(cudaStream_t stream, const ConvPack& p, const uint8_t* x, const uint8_t* zero_point,
                             int8_t* packed);
/// The outputs of an integer product from cuBLAS's int32 sums (dev_epilogue_at), n of them.
cudaError_t launch_int_epilogue(cudaStream_t stream, const IntEpilogue& e, const IntEpilogueArgs& a, int64_t n);
/// QLinearAdd or QLinearMul of codes (dev_qbinary_at): n outputs.
cudaError_t launch_qbinary(cudaStream_t stream, const DevQBinary& q, const uint8_t* a, const uint8_t* b, uint8_t* y,
                           int64_t n);
/// QLinearGlobalAveragePool (dev_qglobal_pool_at): one output per image and channel, n of them.
cudaError_t launch_qglobal_pool(cudaStream_t stream, const DevQGlobalPool& p, const uint8_t* x, uint8_t* y, int64_t n);
/// QLinearAveragePool (dev_qavg_pool_at): n outputs.
cudaError_t launch_qavg_pool(cudaStream_t stream, const DevQAvgPool& p, const uint8_t* x, uint8_t* y, int64_t n);
/// QLinearSoftmax of n codes (dev_qsoftmax_row): a thread per row.
cudaError_t launch_qsoftmax(cudaStream_t stream, const DevQSoftmax& p, const uint8_t* x, uint8_t* y, int64_t n);
/// One QLinearConcat operand of n codes into y (dev_qconcat_at).
cudaError_t launch_qconcat(cudaStream_t stream, const DevQRequant& r, const uint8_t* x, uint8_t* y, int64_t n);

}  // namespace mosaic::cuda_backend
