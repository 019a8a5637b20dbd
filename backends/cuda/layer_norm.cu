// The cuda backend's LayerNormalization: a block of threads per row, the mean and then the
// variance about it reduced in shared memory (two passes over the row: no cancellation of
// large means), then the row normalised, scaled and shifted.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

/// The sum of every thread's `v` in the block (kThreads threads), returned to all of them.
__device__ float block_sum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();  // shared is reused by the next reduction
  return total;
}

__global__ void layer_norm_kernel(const float* x, const float* scale, const float* bias, float* y, int64_t rows,
                                  int64_t cols, float epsilon) {
  __shared__ float shared[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) s += xr[j];
    const float mean = block_sum(s, shared) / static_cast<float>(cols);
    float q = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
      const float d = xr[j] - mean;
      q += d * d;
    }
    const float inv_std = rsqrtf(block_sum(q, shared) / static_cast<float>(cols) + epsilon);
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
      const float v = (xr[j] - mean) * inv_std * scale[j];
      yr[j] = bias ? v + bias[j] : v;
    }
  }
}

}  // namespace

cudaError_t launch_layer_norm(cudaStream_t stream, const float* x, const float* scale, const float* bias, float* y,
                              int64_t rows, int64_t cols, float epsilon) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(rows < 65535 * 16 ? rows : 65535 * 16);
  layer_norm_kernel<<<blocks, kThreads, 0, stream>>>(x, scale, bias, y, rows, cols, epsilon);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
