// The cuda backend's own kernels: element-wise functions (operators/eltwise.hpp's formulas, in
// float), broadcasting binary ops, and the row broadcast of a Gemm's bias. Grid-stride loops;
// each launcher queues one kernel on the given stream.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

__device__ float apply(const DevUnaryArgs& f, float x) {
  switch (f.op) {
    case DevUnary::kNone: return x;
    case DevUnary::kRelu: return x > 0.f ? x : 0.f;
    case DevUnary::kLeakyRelu: return x >= 0.f ? x : f.alpha * x;
    case DevUnary::kSigmoid: return 1.f / (1.f + expf(-x));
    case DevUnary::kTanh: return tanhf(x);
    case DevUnary::kClip: return fminf(fmaxf(x, f.lo), f.hi);
    case DevUnary::kExp: return expf(x);
    case DevUnary::kLog: return logf(x);
    case DevUnary::kSqrt: return sqrtf(x);
    case DevUnary::kErf: return erff(x);
    case DevUnary::kNeg: return -x;
    case DevUnary::kAbs: return fabsf(x);
    case DevUnary::kReciprocal: return 1.f / x;
    case DevUnary::kSoftplus: return x > 20.f ? x : log1pf(expf(x));
    case DevUnary::kSoftsign: return x / (1.f + fabsf(x));
    case DevUnary::kElu: return x > 0.f ? x : f.alpha * expm1f(x);
    case DevUnary::kSelu: return f.gamma * (x > 0.f ? x : f.alpha * expm1f(x));
    case DevUnary::kHardSigmoid: return fmaxf(0.f, fminf(1.f, f.alpha * x + f.beta));
    case DevUnary::kHardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
    case DevUnary::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case DevUnary::kGeluTanh:
      return 0.5f * x * (1.f + tanhf(0.79788456080286535588f * (x + 0.044715f * x * x * x)));
    case DevUnary::kSin: return sinf(x);
    case DevUnary::kCos: return cosf(x);
  }
  return x;
}

__global__ void unary_kernel(DevUnaryArgs f, const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = apply(f, x[i]);
}

__global__ void binary_kernel(DevBinary op, Broadcast s, const float* a, const float* b, float* y, int64_t n,
                              DevUnaryArgs f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t k = rest % s.dims[d];
      rest /= s.dims[d];
      ia += k * s.a_strides[d];
      ib += k * s.b_strides[d];
    }
    const float u = a[ia], v = b[ib];
    float r = 0.f;
    switch (op) {
      case DevBinary::kAdd: r = u + v; break;
      case DevBinary::kSub: r = u - v; break;
      case DevBinary::kMul: r = u * v; break;
      case DevBinary::kDiv: r = u / v; break;
    }
    y[i] = apply(f, r);
  }
}

__global__ void broadcast_rows_kernel(const float* c, int64_t row_stride, int64_t col_stride, float* y, int64_t m,
                                      int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = c[(i / n) * row_stride + (i % n) * col_stride];
}

}  // namespace

cudaError_t launch_unary(cudaStream_t stream, const DevUnaryArgs& f, const float* x, float* y, int64_t n) {
  if (n <= 0) return cudaSuccess;
  unary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(f, x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_binary(cudaStream_t stream, DevBinary op, const Broadcast& shape, const float* a, const float* b,
                          float* y, int64_t n, const DevUnaryArgs& f) {
  if (n <= 0) return cudaSuccess;
  binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, shape, a, b, y, n, f);
  return cudaGetLastError();
}

cudaError_t launch_broadcast_rows(cudaStream_t stream, const float* c, int64_t row_stride, int64_t col_stride, float* y,
                                  int64_t m, int64_t n) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  broadcast_rows_kernel<<<blocks_for(m * n), kThreads, 0, stream>>>(c, row_stride, col_stride, y, m, n);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
