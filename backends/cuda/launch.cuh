// What the cuda backend's .cu files share: the block size of their grid-stride loops, the
// grid that covers n elements (capped: each thread then strides over several) and the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mosaic::cuda_backend {

constexpr int kThreads = 256;

inline int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

/// Queues `kernel` (a grid-stride loop over n items) on `stream` with `args`; nothing for none.
template <class Kernel, class... Args>
cudaError_t launch_over(Kernel kernel, cudaStream_t stream, int64_t n, const Args&... args) {
  if (n <= 0) return cudaSuccess;
  kernel<<<blocks_for(n), kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

}  // namespace mosaic::cuda_backend
