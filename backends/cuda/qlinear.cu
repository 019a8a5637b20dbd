// The cuda backend's kernels for the com.microsoft QOperator element-wise ops (qlinear.cpp):
// each thread computes device_qlinear.hpp's function of its elements, the same function the
// host's tests check against the naive oracle; grid-stride loops, one kernel queued on the
// given stream per launcher.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

__device__ inline int64_t first_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void qbinary_kernel(DevQBinary q, const uint8_t* a, const uint8_t* b, uint8_t* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = static_cast<uint8_t>(dev_qbinary_at(q, a, b, i));
}

__global__ void qglobal_pool_kernel(DevQGlobalPool p, const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t o = first_index(); o < n; o += grid_stride()) y[o] = static_cast<uint8_t>(dev_qglobal_pool_at(p, x, o));
}

__global__ void qavg_pool_kernel(DevQAvgPool p, const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t o = first_index(); o < n; o += grid_stride()) y[o] = static_cast<uint8_t>(dev_qavg_pool_at(p, x, o));
}

__global__ void qsoftmax_kernel(DevQSoftmax p, const uint8_t* x, uint8_t* y, int64_t rows) {
  for (int64_t r = first_index(); r < rows; r += grid_stride()) dev_qsoftmax_row(p, x, y, r);
}

__global__ void qconcat_kernel(DevQRequant r, const uint8_t* x, uint8_t* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dev_qconcat_at(r, x, y, i);
}

}  // namespace

cudaError_t launch_qbinary(cudaStream_t stream, const DevQBinary& q, const uint8_t* a, const uint8_t* b, uint8_t* y,
                           int64_t n) {
  return launch_over(qbinary_kernel, stream, n, q, a, b, y, n);
}

cudaError_t launch_qglobal_pool(cudaStream_t stream, const DevQGlobalPool& p, const uint8_t* x, uint8_t* y, int64_t n) {
  return launch_over(qglobal_pool_kernel, stream, n, p, x, y, n);
}

cudaError_t launch_qavg_pool(cudaStream_t stream, const DevQAvgPool& p, const uint8_t* x, uint8_t* y, int64_t n) {
  return launch_over(qavg_pool_kernel, stream, n, p, x, y, n);
}

cudaError_t launch_qsoftmax(cudaStream_t stream, const DevQSoftmax& p, const uint8_t* x, uint8_t* y, int64_t n) {
  const int64_t rows = p.len > 0 ? n / p.len : 0;
  return launch_over(qsoftmax_kernel, stream, rows, p, x, y, rows);
}

cudaError_t launch_qconcat(cudaStream_t stream, const DevQRequant& r, const uint8_t* x, uint8_t* y, int64_t n) {
  return launch_over(qconcat_kernel, stream, n, r, x, y, n);
}

}  // namespace mosaic::cuda_backend
