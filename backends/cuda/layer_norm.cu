// The cuda backend's LayerNormalization: a block of threads per row, the mean and then the
// variance about it reduced in shared memory (two passes over the row: no cancellation of
// large means), then the row normalised, scaled and shifted; backward likewise per row, and
// the scale's and bias's gradients by columns over chunks of rows, then the chunks added.
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

/// Backward, a block per row: the row's statistics again (as forward: two passes), kept in
/// `stats` (mean, inverse deviation per row) for the parameters' gradients; then with
/// g = dy scale and xhat the normalised row, dx = inv_std (g - mean(g) - xhat mean(g xhat)).
__global__ void layer_norm_backward_rows(const float* x, const float* scale, const float* dy, float* dx, float* stats,
                                         int64_t rows, int64_t cols, float epsilon) {
  __shared__ float shared[kThreads];
  const float n = static_cast<float>(cols);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    const float* gr = dy + r * cols;
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) s += xr[j];
    const float mean = block_sum(s, shared) / n;
    float q = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
      const float d = xr[j] - mean;
      q += d * d;
    }
    const float inv_std = rsqrtf(block_sum(q, shared) / n + epsilon);
    if (threadIdx.x == 0) {
      stats[2 * r] = mean;
      stats[2 * r + 1] = inv_std;
    }
    if (!dx) continue;
    float s1 = 0.f, s2 = 0.f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
      const float g = gr[j] * scale[j];
      s1 += g;
      s2 += g * (xr[j] - mean) * inv_std;
    }
    const float mean_g = block_sum(s1, shared) / n, mean_gx = block_sum(s2, shared) / n;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
      const float xhat = (xr[j] - mean) * inv_std;
      dx[r * cols + j] = inv_std * (gr[j] * scale[j] - mean_g - xhat * mean_gx);
    }
  }
}

/// The parameters' gradients in two deterministic passes (a thread per column alone would
/// leave most of the GPU idle: 768 columns are 3 blocks). First, partial sums over chunks of
/// `per` rows, block (column tile, chunk): part[c][j] = sum over the chunk of dy xhat, and
/// part[chunks + c][j] of dy; then a thread per column adds its chunks in order.
__global__ void layer_norm_param_partials(const float* x, const float* dy, const float* stats, float* part, int64_t rows,
                                          int64_t cols, LayerNormChunks ch) {
  const int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (j >= cols) return;
  layer_norm_chunk_sums(x, dy, stats, rows, cols, ch, c, j, &part[c * cols + j], &part[(ch.chunks + c) * cols + j]);
}

__global__ void layer_norm_param_sums(const float* part, float* dscale, float* dbias, int64_t cols, int64_t chunks) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float ds = 0.f, db = 0.f;
    for (int64_t c = 0; c < chunks; ++c) {
      ds += part[c * cols + j];
      db += part[(chunks + c) * cols + j];
    }
    if (dscale) dscale[j] = ds;
    if (dbias) dbias[j] = db;
  }
}

}  // namespace

cudaError_t launch_layer_norm_backward(cudaStream_t stream, const float* x, const float* scale, const float* dy,
                                       float* dx, float* dscale, float* dbias, float* stats, int64_t rows, int64_t cols,
                                       float epsilon) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(rows < 65535 * 16 ? rows : 65535 * 16);
  layer_norm_backward_rows<<<blocks, kThreads, 0, stream>>>(x, scale, dy, dx, stats, rows, cols, epsilon);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || (!dscale && !dbias)) return e;
  const LayerNormChunks ch = layer_norm_chunks(rows);
  float* part = stats + 2 * rows;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads), static_cast<unsigned>(ch.chunks));
  layer_norm_param_partials<<<grid, kThreads, 0, stream>>>(x, dy, stats, part, rows, cols, ch);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  layer_norm_param_sums<<<blocks_for(cols), kThreads, 0, stream>>>(part, dscale, dbias, cols, ch.chunks);
  return cudaGetLastError();
}

cudaError_t launch_layer_norm(cudaStream_t stream, const float* x, const float* scale, const float* bias, float* y,
                              int64_t rows, int64_t cols, float epsilon) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(rows < 65535 * 16 ? rows : 65535 * 16);
  layer_norm_kernel<<<blocks, kThreads, 0, stream>>>(x, scale, bias, y, rows, cols, epsilon);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
