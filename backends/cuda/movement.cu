// The cuda backend's data movement and reductions: one gather over per-axis index maps (Pad,
// Slice, Transpose) and its adjoint (their backward), one reduction over any set of axes (a
// thread per output, accumulating in double as the naive oracle does) and its backward (a
// thread per input element, after a pass per output where the rule needs the whole group).
// Grid-stride loops on the given stream.
#include <cfloat>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/launch.cuh"

namespace mosaic::cuda_backend {
namespace {

__global__ void axis_gather_kernel(AxisGather g, const float* x, float* y, int64_t n, float fill, const float* fill_device) {
  const float value = fill_device ? *fill_device : fill;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t offset = axis_gather_offset(g, i);
    y[i] = offset >= 0 ? x[offset] : value;
  }
}

__device__ double reduce_step(DevReduce op, double acc, double v) {
  switch (op) {
    case DevReduce::kMax: return v > acc || isnan(v) ? v : acc;
    case DevReduce::kMin: return v < acc || isnan(v) ? v : acc;
    case DevReduce::kProd: return acc * v;
    case DevReduce::kL1: return acc + fabs(v);
    case DevReduce::kL2:
    case DevReduce::kSumSquare: return acc + v * v;
    case DevReduce::kSum:
    case DevReduce::kMean:
    case DevReduce::kLogSum:
    case DevReduce::kLogSumExp: return acc + v;  // LogSumExp adds exp(x - max) (see below)
  }
  return acc + v;
}

__global__ void reduce_kernel(DevReduce op, ReduceGeometry g, const float* x, float* y, int64_t n_out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_out;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, base = 0;
    for (int d = g.kept_rank - 1; d >= 0; --d) {
      base += (rest % g.out_dims[d]) * g.kept_strides[d];
      rest /= g.out_dims[d];
    }
    auto at = [&](int64_t j) {
      int64_t off = base;
      for (int d = g.red_rank - 1; d >= 0; --d) {
        off += (j % g.red_dims[d]) * g.red_strides[d];
        j /= g.red_dims[d];
      }
      return static_cast<double>(x[off]);
    };
    double acc = 0;
    if (op == DevReduce::kLogSumExp) {
      // log(sum exp(x)) = max + log(sum exp(x - max)): large x do not overflow.
      double m = -INFINITY;
      for (int64_t j = 0; j < g.count; ++j) m = fmax(m, at(j));
      if (isinf(m)) {
        acc = m;
      } else {
        for (int64_t j = 0; j < g.count; ++j) acc += exp(at(j) - m);
        acc = m + log(acc);
      }
      y[i] = static_cast<float>(acc);
      continue;
    }
    acc = op == DevReduce::kMax ? -INFINITY : op == DevReduce::kMin ? INFINITY : op == DevReduce::kProd ? 1.0 : 0.0;
    for (int64_t j = 0; j < g.count; ++j) acc = reduce_step(op, acc, at(j));
    if (op == DevReduce::kMean) acc /= static_cast<double>(g.count);
    else if (op == DevReduce::kL2) acc = sqrt(acc);
    else if (op == DevReduce::kLogSum) acc = log(acc);
    y[i] = static_cast<float>(acc);
  }
}

__global__ void axis_scatter_kernel(AxisScatter s, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = axis_scatter_at(s, i, dy);
}

__global__ void reduce_stats_kernel(DevReduce op, ReduceGeometry g, const float* x, const float* y, double* stats,
                                    int64_t n_out) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < n_out;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dev_reduce_stats(op, g, o, x, y[o], &stats[2 * o], &stats[2 * o + 1]);
}

__global__ void reduce_backward_kernel(DevReduce op, ReduceBack back, double count, const float* x, const float* y,
                                       const float* dy, const double* stats, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t o = reduce_output_of(back, i);
    dx[i] = dev_reduce_grad(op, x ? x[i] : 0.f, y ? y[o] : 0.f, dy[o], count, stats ? stats[2 * o] : 0.0,
                            stats ? stats[2 * o + 1] : 1.0);
  }
}

__global__ void gather_kernel(GatherGeometry g, const float* data, const int64_t* indices, float* y, int64_t n,
                              unsigned long long* first_bad) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t bad = 0;
    const int64_t src = gather_offset(g, indices, o, &bad);
    if (src < 0) {
      atomicMin(first_bad, static_cast<unsigned long long>(bad));
      y[o] = 0.f;
    } else {
      y[o] = data[src];
    }
  }
}

__global__ void gather_backward_kernel(GatherGeometry g, const int64_t* indices, const float* dy, float* ddata,
                                       int64_t n) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t bad = 0;
    const int64_t src = gather_offset(g, indices, o, &bad);
    if (src >= 0) atomicAdd(&ddata[src], dy[o]);
  }
}

}  // namespace

cudaError_t launch_gather(cudaStream_t stream, const GatherGeometry& g, const float* data, const int64_t* indices,
                          float* y, unsigned long long* first_bad) {
  const int64_t n = g.outer * g.count * g.inner;
  if (n <= 0) return cudaSuccess;
  gather_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, data, indices, y, n, first_bad);
  return cudaGetLastError();
}

cudaError_t launch_gather_backward(cudaStream_t stream, const GatherGeometry& g, const int64_t* indices,
                                   const float* dy, float* ddata, int64_t data_elements) {
  cudaError_t e = cudaMemsetAsync(ddata, 0, static_cast<size_t>(data_elements) * sizeof(float), stream);
  const int64_t n = g.outer * g.count * g.inner;
  if (e != cudaSuccess || n <= 0) return e;
  gather_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, indices, dy, ddata, n);
  return cudaGetLastError();
}

cudaError_t launch_axis_scatter(cudaStream_t stream, const AxisScatter& s, const float* dy, float* dx, int64_t n) {
  if (n <= 0) return cudaSuccess;
  axis_scatter_kernel<<<blocks_for(n), kThreads, 0, stream>>>(s, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_reduce_backward(cudaStream_t stream, DevReduce op, const ReduceGeometry& g, const ReduceBack& back,
                                   const float* x, const float* y, const float* dy, double* stats, float* dx,
                                   int64_t n_in, int64_t n_out) {
  if (n_in <= 0) return cudaSuccess;
  if (stats) {
    reduce_stats_kernel<<<blocks_for(n_out), kThreads, 0, stream>>>(op, g, x, y, stats, n_out);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  reduce_backward_kernel<<<blocks_for(n_in), kThreads, 0, stream>>>(op, back, static_cast<double>(g.count), x, y, dy,
                                                                    stats, dx, n_in);
  return cudaGetLastError();
}

cudaError_t launch_axis_gather(cudaStream_t stream, const AxisGather& g, const float* x, float* y, int64_t n, float fill,
                               const float* fill_device) {
  if (n <= 0) return cudaSuccess;
  axis_gather_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, x, y, n, fill, fill_device);
  return cudaGetLastError();
}

cudaError_t launch_reduce(cudaStream_t stream, DevReduce op, const ReduceGeometry& g, const float* x, float* y,
                          int64_t n_out) {
  if (n_out <= 0) return cudaSuccess;
  reduce_kernel<<<blocks_for(n_out), kThreads, 0, stream>>>(op, g, x, y, n_out);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
