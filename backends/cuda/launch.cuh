// What the cuda backend's .cu files share: the block size of their grid-stride loops and the
// grid that covers n elements (capped: each thread then strides over several).
#pragma once

#include <cstdint>

namespace mosaic::cuda_backend {

constexpr int kThreads = 256;

inline int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace mosaic::cuda_backend
