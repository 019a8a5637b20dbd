// The cuda backend's own kernels: element-wise functions (operators/eltwise.hpp's formulas, in
// float), broadcasting binary ops, and the row broadcast of a Gemm's bias. Grid-stride loops,
// 16-byte loads where the operands are contiguous and aligned; each launcher queues one kernel
// on the given stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

/// Four elements a thread at a time through 16-byte loads where x and y are 16-byte aligned
/// (n4 = n / 4 such groups, else 0), then the rest one at a time: the loop a memory-bound
/// element-wise op needs to reach the device's bandwidth.
__global__ void unary_kernel(DevUnaryArgs f, const float* x, float* y, int64_t n, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    float4 v = reinterpret_cast<const float4*>(x)[i];
    v.x = dev_apply(f, v.x);
    v.y = dev_apply(f, v.y);
    v.z = dev_apply(f, v.z);
    v.w = dev_apply(f, v.w);
    reinterpret_cast<float4*>(y)[i] = v;
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) y[i] = dev_apply(f, x[i]);
}

/// Operands of the output's shape (nothing broadcast): unary_kernel's loop over two inputs.
__global__ void binary_same_kernel(DevBinary op, const float* a, const float* b, float* y, int64_t n, int64_t n4,
                                   DevUnaryArgs f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    const float4 u = reinterpret_cast<const float4*>(a)[i], v = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(y)[i] =
        make_float4(dev_apply(f, dev_combine(op, u.x, v.x)), dev_apply(f, dev_combine(op, u.y, v.y)),
                    dev_apply(f, dev_combine(op, u.z, v.z)), dev_apply(f, dev_combine(op, u.w, v.w)));
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) y[i] = dev_apply(f, dev_combine(op, a[i], b[i]));
}

__global__ void binary_kernel(DevBinary op, Broadcast s, const float* a, const float* b, float* y, int64_t n,
                              DevUnaryArgs f) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t ia = 0, ib = 0;
    broadcast_offsets(s, i, &ia, &ib);
    y[i] = dev_apply(f, dev_combine(op, a[ia], b[ib]));
  }
}

__global__ void broadcast_rows_kernel(const float* c, int64_t row_stride, int64_t col_stride, float* y, int64_t m,
                                      int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = c[(i / n) * row_stride + (i % n) * col_stride];
}

/// The i-th four floats of p, zeros where p is not given (an operand the gradient does not read).
__device__ inline float4 load4_or_zero(const float* p, int64_t i) {
  return p ? reinterpret_cast<const float4*>(p)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
}

/// dx = dy f'(x, y), x and y each read only where given: four elements a thread through
/// 16-byte loads where every operand is aligned (n4 = n / 4), then the rest one at a time.
__global__ void unary_backward_kernel(DevUnaryArgs f, const float* x, const float* y, const float* dy, float* dx,
                                      int64_t n, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    const float4 g = reinterpret_cast<const float4*>(dy)[i];
    const float4 u = load4_or_zero(x, i), v = load4_or_zero(y, i);
    reinterpret_cast<float4*>(dx)[i] = make_float4(g.x * dev_derivative(f, u.x, v.x), g.y * dev_derivative(f, u.y, v.y),
                                                   g.z * dev_derivative(f, u.z, v.z), g.w * dev_derivative(f, u.w, v.w));
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) dx[i] = dy[i] * dev_derivative(f, x ? x[i] : 0.f, y ? y[i] : 0.f);
}

/// Both operands' gradients of a binary op over operands of the output's shape, in one pass
/// over dy (a residual Add's backward): da and db each written only where given, a and b read
/// only where the op's gradient reads them; 16-byte loads as unary_backward_kernel's.
__global__ void binary_backward_same_kernel(DevBinary op, const float* dy, const float* a, const float* b, float* da,
                                            float* db, int64_t n, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    const float4 g = reinterpret_cast<const float4*>(dy)[i];
    const float4 u = load4_or_zero(a, i), v = load4_or_zero(b, i);
    if (da)
      reinterpret_cast<float4*>(da)[i] =
          make_float4(dev_binary_grad(op, 0, g.x, u.x, v.x), dev_binary_grad(op, 0, g.y, u.y, v.y),
                      dev_binary_grad(op, 0, g.z, u.z, v.z), dev_binary_grad(op, 0, g.w, u.w, v.w));
    if (db)
      reinterpret_cast<float4*>(db)[i] =
          make_float4(dev_binary_grad(op, 1, g.x, u.x, v.x), dev_binary_grad(op, 1, g.y, u.y, v.y),
                      dev_binary_grad(op, 1, g.z, u.z, v.z), dev_binary_grad(op, 1, g.w, u.w, v.w));
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) {
    const float u = a ? a[i] : 0.f, v = b ? b[i] : 0.f;
    if (da) da[i] = dev_binary_grad(op, 0, dy[i], u, v);
    if (db) db[i] = dev_binary_grad(op, 1, dy[i], u, v);
  }
}

/// Few terms per element: a thread sums an element's terms.
__global__ void grad_reduce_thread_kernel(DevBinary op, int which, GradReduce g, const float* dy, const float* a,
                                          const float* b, float* out, float scale) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < g.elements;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int64_t r = 0; r < g.count; ++r) sum += grad_reduce_term(op, which, g, o, r, dy, a, b);
    out[o] = scale * sum;
  }
}

/// Many terms per element: a block sums an element's terms (each thread a strided share, then
/// a tree in shared memory), blocks striding over the elements.
__global__ void grad_reduce_block_kernel(DevBinary op, int which, GradReduce g, const float* dy, const float* a,
                                         const float* b, float* out, float scale) {
  __shared__ float partial[kThreads];
  for (int64_t o = blockIdx.x; o < g.elements; o += gridDim.x) {
    float sum = 0.f;
    for (int64_t r = threadIdx.x; r < g.count; r += blockDim.x) sum += grad_reduce_term(op, which, g, o, r, dy, a, b);
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
      if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[o] = scale * partial[0];
    __syncthreads();  // partial[] is reused by the next element
  }
}

/// dst += src, 16-byte loads where both are aligned (n4 = n / 4).
__global__ void accumulate_kernel(float* dst, const float* src, int64_t n, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    float4 d = reinterpret_cast<float4*>(dst)[i];
    const float4 v = reinterpret_cast<const float4*>(src)[i];
    d.x += v.x;
    d.y += v.y;
    d.z += v.z;
    d.w += v.w;
    reinterpret_cast<float4*>(dst)[i] = d;
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) dst[i] += src[i];
}

__global__ void optimizer_kernel(OptimizerRule o, float* p, const float* g, float* s0, float* s1, int64_t n) {
  float unused0 = 0.f, unused1 = 0.f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dev_optimizer_update(o, &p[i], g[i], s0 ? &s0[i] : &unused0, s1 ? &s1[i] : &unused1);
}

/// Rounds to float16 (__float2half_rn) or bfloat16 (__float2bfloat16_rn), nearest even.
__global__ void narrow_kernel(bool bf16, const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x[i])) : __half_as_ushort(__float2half_rn(x[i]));
}

__global__ void widen_kernel(bool bf16, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = bf16 ? __bfloat162float(__ushort_as_bfloat16(x[i])) : __half2float(__ushort_as_half(x[i]));
}

}  // namespace

cudaError_t launch_unary(cudaStream_t stream, const DevUnaryArgs& f, const float* x, float* y, int64_t n) {
  if (n <= 0) return cudaSuccess;
  const int64_t n4 = aligned16(x) && aligned16(y) ? n / 4 : 0;
  unary_kernel<<<blocks_for(n4 ? n4 : n), kThreads, 0, stream>>>(f, x, y, n, n4);
  return cudaGetLastError();
}

cudaError_t launch_binary(cudaStream_t stream, DevBinary op, const Broadcast& shape, const float* a, const float* b,
                          float* y, int64_t n, const DevUnaryArgs& f) {
  if (n <= 0) return cudaSuccess;
  if (shape.rank <= 1 && (shape.rank == 0 || (shape.a_strides[0] == 1 && shape.b_strides[0] == 1))) {
    const int64_t n4 = aligned16(a) && aligned16(b) && aligned16(y) ? n / 4 : 0;
    binary_same_kernel<<<blocks_for(n4 ? n4 : n), kThreads, 0, stream>>>(op, a, b, y, n, n4, f);
  } else {
    binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(op, shape, a, b, y, n, f);
  }
  return cudaGetLastError();
}

cudaError_t launch_broadcast_rows(cudaStream_t stream, const float* c, int64_t row_stride, int64_t col_stride, float* y,
                                  int64_t m, int64_t n) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  broadcast_rows_kernel<<<blocks_for(m * n), kThreads, 0, stream>>>(c, row_stride, col_stride, y, m, n);
  return cudaGetLastError();
}

cudaError_t launch_unary_backward(cudaStream_t stream, const DevUnaryArgs& f, const float* x, const float* y,
                                  const float* dy, float* dx, int64_t n) {
  if (n <= 0) return cudaSuccess;
  const bool aligned = aligned16(dy) && aligned16(dx) && (!x || aligned16(x)) && (!y || aligned16(y));
  const int64_t n4 = aligned ? n / 4 : 0;
  unary_backward_kernel<<<blocks_for(n4 ? n4 : n), kThreads, 0, stream>>>(f, x, y, dy, dx, n, n4);
  return cudaGetLastError();
}

cudaError_t launch_binary_backward_same(cudaStream_t stream, DevBinary op, const float* dy, const float* a,
                                        const float* b, float* da, float* db, int64_t n) {
  if (n <= 0 || (!da && !db)) return cudaSuccess;
  const bool aligned = aligned16(dy) && (!a || aligned16(a)) && (!b || aligned16(b)) && (!da || aligned16(da)) &&
                       (!db || aligned16(db));
  const int64_t n4 = aligned ? n / 4 : 0;
  binary_backward_same_kernel<<<blocks_for(n4 ? n4 : n), kThreads, 0, stream>>>(op, dy, a, b, da, db, n, n4);
  return cudaGetLastError();
}

cudaError_t launch_grad_reduce(cudaStream_t stream, DevBinary op, int which, const GradReduce& g, const float* dy,
                               const float* a, const float* b, float* out, float scale) {
  if (g.elements <= 0) return cudaSuccess;
  if (g.count < 64) {
    grad_reduce_thread_kernel<<<blocks_for(g.elements), kThreads, 0, stream>>>(op, which, g, dy, a, b, out, scale);
  } else {
    const int64_t blocks = g.elements < 65535 * 16 ? g.elements : 65535 * 16;
    grad_reduce_block_kernel<<<static_cast<int>(blocks), kThreads, 0, stream>>>(op, which, g, dy, a, b, out, scale);
  }
  return cudaGetLastError();
}

cudaError_t launch_narrow(cudaStream_t stream, Float16Kind kind, const float* x, uint16_t* y, int64_t n) {
  if (n <= 0) return cudaSuccess;
  narrow_kernel<<<blocks_for(n), kThreads, 0, stream>>>(kind == Float16Kind::kBfloat16, x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_widen(cudaStream_t stream, Float16Kind kind, const uint16_t* x, float* y, int64_t n) {
  if (n <= 0) return cudaSuccess;
  widen_kernel<<<blocks_for(n), kThreads, 0, stream>>>(kind == Float16Kind::kBfloat16, x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_accumulate(cudaStream_t stream, float* dst, const float* src, int64_t n) {
  if (n <= 0) return cudaSuccess;
  const int64_t n4 = aligned16(dst) && aligned16(src) ? n / 4 : 0;
  accumulate_kernel<<<blocks_for(n4 ? n4 : n), kThreads, 0, stream>>>(dst, src, n, n4);
  return cudaGetLastError();
}

cudaError_t launch_optimizer_step(cudaStream_t stream, const OptimizerRule& o, float* p, const float* g, float* s0,
                                  float* s1, int64_t n) {
  if (n <= 0) return cudaSuccess;
  optimizer_kernel<<<blocks_for(n), kThreads, 0, stream>>>(o, p, g, s0, s1, n);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
