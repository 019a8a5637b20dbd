#include "backends/common/grad.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/common/broadcast.hpp"

namespace mosaic {

void binary_backward(BinaryOp op, const Shape& a_shape, const Shape& b_shape, const Shape& out_shape, const float* a,
                     const float* b, const float* dy, float* da, float* db) {
  Shape out = out_shape.empty() ? Shape{1} : out_shape;
  const int64_t n = shape_numel(out);
  if (a_shape == out && b_shape == out) {
    // No broadcasting (residual adds, gates): element-wise and parallel; the ops training
    // spends most time in without the row's per-element call.
    if (op == BinaryOp::kAdd || op == BinaryOp::kSub || op == BinaryOp::kMul) {
      const float sign = op == BinaryOp::kSub ? -1.f : 1.f;
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) {
        if (da) da[i] = op == BinaryOp::kMul ? dy[i] * b[i] : dy[i];
        if (db) db[i] = op == BinaryOp::kMul ? dy[i] * a[i] : sign * dy[i];
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      if (da) da[i] = binary_grad_a(op, dy[i], a[i], b[i]);
      if (db) db[i] = binary_grad_b(op, dy[i], a[i], b[i]);
    }
    return;
  }
  // A bias: Add/Sub of a full operand and one broadcast along leading axes only ([C] or
  // [T, C] onto [N, T, C], as PyTorch exports nn.Linear's bias): the full operand's gradient
  // is dy (or -dy), the bias's the column sums of dy. Rows summed in double.
  auto trailing = [&](const Shape& s) {  // s is out's last dims (leading 1s allowed)
    size_t lead = 0;
    while (lead < s.size() && s[lead] == 1) ++lead;
    if (s.size() - lead > out.size()) return false;
    return std::equal(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end(), out.end() - static_cast<std::ptrdiff_t>(s.size() - lead));
  };
  if ((op == BinaryOp::kAdd || op == BinaryOp::kSub) &&
      ((a_shape == out && trailing(b_shape)) || (b_shape == out && trailing(a_shape)))) {
    const bool a_full = a_shape == out;
    float* dfull = a_full ? da : db;
    float* dbias = a_full ? db : da;
    const float full_sign = op == BinaryOp::kSub && !a_full ? -1.f : 1.f;
    const float bias_sign = op == BinaryOp::kSub && a_full ? -1.f : 1.f;
    if (dfull) {
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) dfull[i] = full_sign * dy[i];
    }
    if (dbias) {
      const int64_t cols = shape_numel(a_full ? b_shape : a_shape), rows = n / std::max<int64_t>(cols, 1);
      std::vector<double> sum(static_cast<size_t>(cols), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = dy + r * cols;
        for (int64_t c = 0; c < cols; ++c) sum[static_cast<size_t>(c)] += row[c];
      }
      for (int64_t c = 0; c < cols; ++c) dbias[c] = bias_sign * static_cast<float>(sum[static_cast<size_t>(c)]);
    }
    return;
  }
  const auto sa = broadcast_strides(a_shape, out), sb = broadcast_strides(b_shape, out);
  // Sum in double: a broadcast operand can gather many contributions.
  std::vector<double> acc_a(da ? static_cast<size_t>(shape_numel(a_shape)) : 0, 0.0);
  std::vector<double> acc_b(db ? static_cast<size_t>(shape_numel(b_shape)) : 0, 0.0);
  std::vector<int64_t> idx(out.size(), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (da) acc_a[static_cast<size_t>(oa)] += binary_grad_a(op, dy[i], a[oa], b[ob]);
    if (db) acc_b[static_cast<size_t>(ob)] += binary_grad_b(op, dy[i], a[oa], b[ob]);
    for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
      oa += sa[d];
      ob += sb[d];
      if (++idx[d] < out[d]) break;
      oa -= sa[d] * out[d];
      ob -= sb[d] * out[d];
      idx[d] = 0;
    }
  }
  for (size_t i = 0; i < acc_a.size(); ++i) da[i] = static_cast<float>(acc_a[i]);
  for (size_t i = 0; i < acc_b.size(); ++i) db[i] = static_cast<float>(acc_b[i]);
}

void matmul_backward(const MatMulParams& p, const float* a, const float* b, const float* dy, float* da, float* db,
                     const GemmFn& gemm) {
  const int64_t sa = p.m * p.k, sb = p.k * p.n, sy = p.m * p.n;
  const int64_t nb = shape_numel(p.batch);
  if (shape_numel(p.b_batch) == 1 && p.a_batch == p.batch) {
    // A weight shared by every batch entry (x [.., m, k] W [k, n], as nn.Linear exports):
    // two GEMMs over all the rows at once, dA = dY W^T and dW = A^T dY, instead of one
    // small GEMM per batch entry.
    if (da) gemm(false, true, nb * p.m, p.k, p.n, dy, p.n, b, p.n, 0.f, da, p.k);
    if (db) gemm(true, false, p.k, p.n, nb * p.m, a, p.k, dy, p.n, 0.f, db, p.n);
    return;
  }
  if (da) std::fill(da, da + shape_numel(p.a_batch) * sa, 0.f);
  if (db) std::fill(db, db + shape_numel(p.b_batch) * sb, 0.f);
  for_each_matmul_batch(p, [&](int64_t bi, int64_t oa, int64_t ob) {
    // dA (m x k) += dY (m x n) B^T;  dB (k x n) += A^T (k x m) dY.
    if (da) gemm(false, true, p.m, p.k, p.n, dy + bi * sy, p.n, b + ob * sb, p.n, 1.f, da + oa * sa, p.k);
    if (db) gemm(true, false, p.k, p.n, p.m, a + oa * sa, p.k, dy + bi * sy, p.n, 1.f, db + ob * sb, p.n);
  });
}

void batch_norm_statistics(const float* x, int64_t n, int64_t c, int64_t sp, double eps, double momentum, double* mean,
                           double* invstd, float* running_mean, float* running_var) {
  const double m = static_cast<double>(n * sp);
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < sp; ++k) sum += x[(i * c + ch) * sp + k];
    const double mu = sum / m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < sp; ++k) {
        const double d = x[(i * c + ch) * sp + k] - mu;
        sq += d * d;
      }
    mean[ch] = mu;
    invstd[ch] = 1.0 / std::sqrt(sq / m + eps);
    running_mean[ch] = static_cast<float>(momentum * running_mean[ch] + (1 - momentum) * mu);
    running_var[ch] = static_cast<float>(momentum * running_var[ch] + (1 - momentum) * (m > 1 ? sq / (m - 1) : sq / m));
  }
}

}  // namespace mosaic
