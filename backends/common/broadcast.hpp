// Broadcasting helpers shared by the backends' element-wise and MatMul kernels.
#pragma once

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
