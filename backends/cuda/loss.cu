// The cuda backend's training losses (Device::class_loss): softmax cross-entropy and the
// squared error against one-hot targets, a block per row: the row's maximum and arg-max (the
// first of equal maxima, as the host's loop finds it), then its sum in double (exp(x - max),
// or the squared differences), then each element's gradient; device_math.hpp's functions
// do the arithmetic, which tests/test_cuda_math.cpp checks against core/loss.cpp.
#include <cfloat>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

__global__ void class_loss_kernel(LossRule rule, const float* logits, const int64_t* labels, float* dlogits,
                                  double* row_loss, int32_t* row_hit) {
  __shared__ float best[kThreads];
  __shared__ int64_t where[kThreads];
  __shared__ double sums[kThreads];
  const int64_t c = rule.classes;
  for (int64_t r = blockIdx.x; r < rule.rows; r += gridDim.x) {
    const float* x = logits + r * c;
    float* d = dlogits ? dlogits + r * c : nullptr;
    const int64_t label = labels[r];
    if (label == rule.ignore_index) {  // the same for the whole block
      if (d)
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) d[j] = 0.f;
      if (threadIdx.x == 0) {
        row_loss[r] = 0;
        row_hit[r] = 0;
      }
      continue;
    }
    // The maximum and the first index holding it: each thread's own (ascending j, strictly
    // greater), then a tree keeping the larger value, the smaller index on a tie.
    float m = -FLT_MAX;
    int64_t at = INT64_MAX;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
      if (at == INT64_MAX || x[j] > m) {
        m = x[j];
        at = j;
      }
    best[threadIdx.x] = m;
    where[threadIdx.x] = at;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) {
        const float o = best[threadIdx.x + half];
        const int64_t oi = where[threadIdx.x + half];
        if (oi != INT64_MAX && (where[threadIdx.x] == INT64_MAX || o > best[threadIdx.x] ||
                                (o == best[threadIdx.x] && oi < where[threadIdx.x]))) {
          best[threadIdx.x] = o;
          where[threadIdx.x] = oi;
        }
      }
      __syncthreads();
    }
    const float mx = best[0];
    const int64_t arg = where[0];
    double s = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += dev_loss_term(rule, x[j], mx, j == label);
    sums[threadIdx.x] = s;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
      __syncthreads();
    }
    const double sum = sums[0];
    const double lse = dev_loss_lse(rule, sum, mx);
    if (d)
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) d[j] = dev_loss_grad(rule, x[j], lse, j == label);
    if (threadIdx.x == 0) {
      row_loss[r] = dev_loss_row(rule, sum, lse, x[label]);
      row_hit[r] = arg == label ? 1 : 0;
    }
    __syncthreads();  // the shared arrays are reused by the next row
  }
}

}  // namespace

cudaError_t launch_class_loss(cudaStream_t stream, const LossRule& rule, const float* logits, const int64_t* labels,
                              float* dlogits, double* row_loss, int32_t* row_hit) {
  if (rule.rows <= 0 || rule.classes <= 0) return cudaSuccess;
  const int blocks = static_cast<int>(rule.rows < 65535 * 16 ? rule.rows : 65535 * 16);
  class_loss_kernel<<<blocks, kThreads, 0, stream>>>(rule, logits, labels, dlogits, row_loss, row_hit);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
