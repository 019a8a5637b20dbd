// The cuda backend's kernels for 8-bit codes: QuantizeLinear, DequantizeLinear, the code
// lookups of a QDQ model's float stretches, and the packing and epilogue around cuBLAS's int8
// product (quant.cpp). Each thread computes device_quant.hpp's function of its elements, the
// same function the host's tests check against the naive oracle; grid-stride loops, one
// kernel queued on the given stream per launcher.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

__device__ inline int64_t first_index() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void quantize_kernel(const float* x, uint8_t* y, int64_t n, const float* scales, const uint8_t* zps,
                                int64_t axis_dim, int64_t inner, bool y_signed) {
  const int lo = y_signed ? -128 : 0, hi = y_signed ? 127 : 255;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = dev_scale_index(i, axis_dim, inner);
    const int zp = zps ? dev_code(zps[s], y_signed) : 0;
    y[i] = static_cast<uint8_t>(dev_quantize(x[i], scales[s], zp, lo, hi));
  }
}

__global__ void dequantize_kernel(const uint8_t* x, float* y, int64_t n, const float* scales, const uint8_t* zps,
                                  int64_t axis_dim, int64_t inner, bool x_signed) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t s = dev_scale_index(i, axis_dim, inner);
    y[i] = dev_dequantize(dev_code(x[i], x_signed), scales[s], zps ? dev_code(zps[s], x_signed) : 0);
  }
}

__global__ void code_lookup_kernel(const uint8_t* x, const uint8_t* table, uint8_t* y, int64_t n, uint8_t offset) {
  __shared__ uint8_t t[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) t[i] = table[i];
  __syncthreads();
  for (int64_t i = first_index(); i < n; i += grid_stride()) y[i] = t[static_cast<uint8_t>(x[i] + offset)];
}

/// Each block's least and greatest value of x (with 0), a tree in shared memory.
__global__ void range_kernel(const float* x, int64_t n, float* partials) {
  __shared__ float lo[kThreads], hi[kThreads];
  float l = 0.f, h = 0.f;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    l = fminf(l, x[i]);  // fminf passes a NaN over, as the oracle's comparisons do
    h = fmaxf(h, x[i]);
  }
  lo[threadIdx.x] = l;
  hi[threadIdx.x] = h;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      lo[threadIdx.x] = fminf(lo[threadIdx.x], lo[threadIdx.x + half]);
      hi[threadIdx.x] = fmaxf(hi[threadIdx.x], hi[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = lo[0];
    partials[2 * blockIdx.x + 1] = hi[0];
  }
}

/// The blocks' ranges into one, then the scale and zero point (one thread: a few hundred values).
__global__ void dynamic_params_kernel(const float* partials, int blocks, float* params, float* scale_out,
                                      uint8_t* zp_out) {
  float l = 0.f, h = 0.f;
  for (int b = 0; b < blocks; ++b) {
    l = fminf(l, partials[2 * b]);
    h = fmaxf(h, partials[2 * b + 1]);
  }
  float scale = 1.f;
  int zp = 0;
  dev_dynamic_params(l, h, &scale, &zp);
  params[0] = scale;
  reinterpret_cast<uint8_t*>(params + 1)[0] = static_cast<uint8_t>(zp);
  if (scale_out) *scale_out = scale;
  if (zp_out) *zp_out = static_cast<uint8_t>(zp);
}

__global__ void row_pack_kernel(RowPack p, const uint8_t* a, int8_t* packed, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) packed[i] = dev_row_pack_at(p, a, i);
}

__global__ void conv_pack_kernel(ConvPack p, const uint8_t* x, const uint8_t* zero_point, int8_t* packed, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) packed[i] = dev_conv_pack_at(p, x, zero_point, i);
}

__global__ void int_epilogue_kernel(IntEpilogue e, IntEpilogueArgs a, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dev_epilogue_at(e, a, i);
}

}  // namespace

cudaError_t launch_quantize(cudaStream_t stream, const float* x, uint8_t* y, int64_t n, const float* scales,
                            const uint8_t* zero_points, int64_t axis_dim, int64_t inner, bool y_signed) {
  if (n <= 0) return cudaSuccess;
  quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, scales, zero_points, axis_dim, inner, y_signed);
  return cudaGetLastError();
}

cudaError_t launch_dequantize(cudaStream_t stream, const uint8_t* x, float* y, int64_t n, const float* scales,
                              const uint8_t* zero_points, int64_t axis_dim, int64_t inner, bool x_signed) {
  if (n <= 0) return cudaSuccess;
  dequantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, scales, zero_points, axis_dim, inner, x_signed);
  return cudaGetLastError();
}

cudaError_t launch_code_lookup(cudaStream_t stream, const uint8_t* x, const uint8_t* table, uint8_t* y, int64_t n,
                               uint8_t offset) {
  if (n <= 0) return cudaSuccess;
  code_lookup_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, table, y, n, offset);
  return cudaGetLastError();
}

int dynamic_range_blocks(int64_t n) { return blocks_for(n) < 1024 ? blocks_for(n) : 1024; }

cudaError_t launch_dynamic_quantize(cudaStream_t stream, const float* x, uint8_t* y, int64_t n, float* partials,
                                    void* params, float* scale_out, uint8_t* zp_out) {
  const int blocks = dynamic_range_blocks(n);
  range_kernel<<<blocks, kThreads, 0, stream>>>(x, n, partials);
  auto* p = static_cast<float*>(params);
  dynamic_params_kernel<<<1, 1, 0, stream>>>(partials, blocks, p, scale_out, zp_out);
  if (n <= 0) return cudaGetLastError();
  quantize_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, p, reinterpret_cast<const uint8_t*>(p + 1), 1, n,
                                                          false);
  return cudaGetLastError();
}

cudaError_t launch_row_pack(cudaStream_t stream, const RowPack& p, const uint8_t* a, int8_t* packed) {
  const int64_t n = p.rows * p.kp;
  if (n <= 0) return cudaSuccess;
  row_pack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, a, packed, n);
  return cudaGetLastError();
}

cudaError_t launch_conv_pack(cudaStream_t stream, const ConvPack& p, const uint8_t* x, const uint8_t* zero_point,
                             int8_t* packed) {
  const int64_t n = p.groups * p.rows * p.kp;
  if (n <= 0) return cudaSuccess;
  conv_pack_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, x, zero_point, packed, n);
  return cudaGetLastError();
}

cudaError_t launch_int_epilogue(cudaStream_t stream, const IntEpilogue& e, const IntEpilogueArgs& a, int64_t n) {
  if (n <= 0) return cudaSuccess;
  int_epilogue_kernel<<<blocks_for(n), kThreads, 0, stream>>>(e, a, n);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
