// The host side of the cuda backend's reductions: the geometry its kernels (and their
// backward) read, built from operators/reduce.hpp's parameters. Header-only and free of CUDA
// headers, so that tests/test_cuda_math.cpp checks it with device_math.hpp's bodies on any
// machine.
#pragma once

#include <vector>

#include "backends/common/movement.hpp"
#include "backends/cuda/device_math.hpp"
#include "operators/reduce.hpp"

namespace mosaic::cuda_backend {

/// The kept and the reduced axes of `p` (at most 8 dimensions: the caller checks), outermost
/// first, with their strides in the input.
inline ReduceGeometry reduce_geometry(const ReduceParams& p) {
  ReduceGeometry g;
  const std::vector<int64_t> strides = row_major_strides(p.in);
  size_t next = 0;
  for (size_t a = 0; a < p.in.size(); ++a) {
    const bool reduced = next < p.axes.size() && p.axes[next] == static_cast<int64_t>(a);
    if (reduced) {
      ++next;
      g.red_dims[g.red_rank] = p.in[a];
      g.red_strides[g.red_rank++] = strides[a];
    } else {
      g.out_dims[g.kept_rank] = p.in[a];
      g.kept_strides[g.kept_rank++] = strides[a];
    }
  }
  g.count = static_cast<int64_t>(p.count);
  return g;
}

/// Where each input element of a reduction sends its gradient from: its coordinates times
/// the output's strides, 0 along the reduced axes (the output kept as `p.kept`).
inline ReduceBack reduce_back(const ReduceParams& p) {
  ReduceBack b;
  b.rank = static_cast<int>(p.in.size());
  const std::vector<int64_t> out = row_major_strides(p.kept);
  for (size_t a = 0; a < p.in.size(); ++a) {
    b.in_dims[a] = p.in[a];
    b.out_strides[a] = p.kept[a] == 1 && p.in[a] != 1 ? 0 : out[a];
  }
  return b;
}

}  // namespace mosaic::cuda_backend
