// Broadcasting helpers shared by the backends' element-wise and MatMul kernels.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "backends/common/movement.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// Per-axis element strides of `in` viewed at `out`'s rank (leading axes added), with 0
/// where `in` is broadcast (size 1).
inline std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  const auto rs = row_major_strides(in);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) st[i + off] = in[i] == 1 ? 0 : rs[i];
  return st;
}

/// Calls f(i, offsets) for every element i of `out` in order, with offsets[k] the element
/// of operand k (of shape shapes[k], numpy-broadcast onto out) that it reads. Axes along
/// which every operand continues contiguously (or stays broadcast) are merged first, so the
/// innermost loop runs over a whole row with fixed strides and f inlines into it.
template <size_t N, class F>
void each_broadcast(const Shape& out, const std::array<Shape, N>& shapes, F&& f) {
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  std::array<std::vector<int64_t>, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcast_strides(shapes[k], out);
  // Merged axes: dims[d] and, per operand, stride[k][d].
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, N> stride;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // contributes nothing to any offset
    bool merge = !dims.empty();
    for (size_t k = 0; k < N && merge; ++k) merge = stride[k].back() == st[k][d] * out[d];
    if (merge) {
      dims.back() *= out[d];
      for (size_t k = 0; k < N; ++k) stride[k].back() = st[k][d];
      continue;
    }
    dims.push_back(out[d]);
    for (size_t k = 0; k < N; ++k) stride[k].push_back(st[k][d]);
  }
  if (dims.empty()) {  // a single element
    dims.push_back(1);
    for (size_t k = 0; k < N; ++k) stride[k].push_back(0);
  }
  const int64_t rank = static_cast<int64_t>(dims.size()), inner = dims.back();
  std::array<int64_t, N> step{};
  for (size_t k = 0; k < N; ++k) step[k] = stride[k].back();
  std::vector<int64_t> idx(dims.size(), 0);
  std::array<int64_t, N> base{};
  for (int64_t i = 0; i < n; i += inner) {
    std::array<int64_t, N> off = base;
    for (int64_t j = 0; j < inner; ++j) {
      f(i + j, off);
      for (size_t k = 0; k < N; ++k) off[k] += step[k];
    }
    for (int64_t d = rank - 2; d >= 0; --d) {  // the outer axes' odometer
      for (size_t k = 0; k < N; ++k) base[k] += stride[k][d];
      if (++idx[d] < dims[d]) break;
      for (size_t k = 0; k < N; ++k) base[k] -= stride[k][d] * dims[d];
      idx[d] = 0;
    }
  }
}

/// Calls f(batch_index, a_matrix_index, b_matrix_index) for every matrix of a batched,
/// broadcast MatMul (indices count matrices, not elements).
template <class F>
void for_each_matmul_batch(const MatMulParams& p, F&& f) {
  const auto sa = broadcast_strides(p.a_batch, p.batch), sb = broadcast_strides(p.b_batch, p.batch);
  const int64_t nb = shape_numel(p.batch);
  std::vector<int64_t> idx(p.batch.size(), 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    f(bi, oa, ob);
    for (int64_t d = static_cast<int64_t>(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < p.batch[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace mosaic
