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

/// Calls f(i, offsets) for every element i of `out`, with offsets[k] the element of operand
/// k (of shape shapes[k], numpy-broadcast onto out) that it reads.
template <size_t N, class F>
void each_broadcast(const Shape& out, const std::array<Shape, N>& shapes, F&& f) {
  std::array<std::vector<int64_t>, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = broadcast_strides(shapes[k], out);
  const int64_t n = shape_numel(out);
  std::vector<int64_t> idx(out.size(), 0);
  std::array<int64_t, N> off{};
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) off[k] += st[k][d];
      if (++idx[d] < out[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= st[k][d] * out[d];
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
