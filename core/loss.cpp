#include "core/loss.hpp"

#include <algorithm>
#include <cmath>

namespace mosaic {

Expected<LossValue> softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                          int64_t ignore_index) {
  if (logits.rank() < 2)
    return Status::invalid("cross-entropy needs logits [N, C] or [N, T, V], got " + shape_str(logits.shape()));
  const int64_t c = logits.shape().back(), n = logits.numel() / std::max<int64_t>(c, 1);
  if (labels.numel() != n)
    return Status::invalid("cross-entropy: " + std::to_string(labels.numel()) + " labels for " + std::to_string(n) +
                           " rows of logits " + shape_str(logits.shape()));
  LossValue r;
  for (int64_t i = 0; i < n; ++i) {  // the rows that count, before any arithmetic
    const int64_t label = static_cast<int64_t>(labels.get(i));
    if (label == ignore_index) continue;
    if (label < 0 || label >= c)
      return Status::invalid("cross-entropy: label " + std::to_string(label) + " (element " + std::to_string(i) +
                             ") outside [0, " + std::to_string(c) + ")" +
                             (ignore_index < 0 ? " and not the ignore index " + std::to_string(ignore_index) : ""));
    ++r.counted;
  }
  double total = 0;
  int64_t correct = 0;
  const double scale = r.counted > 0 ? 1.0 / static_cast<double>(r.counted) : 0.0;
  // Rows in parallel (a language model's logits are [N * T, vocabulary]: millions of exps).
#pragma omp parallel for schedule(static) reduction(+ : total, correct) if (n * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(labels.get(i));
    float* d = dlogits ? dlogits->f32() + i * c : nullptr;
    if (label == ignore_index) {
      if (d) std::fill(d, d + c, 0.f);
      continue;
    }
    const float* x = logits.f32() + i * c;
    int64_t arg = 0;
    float mx = x[0];
    for (int64_t j = 1; j < c; ++j)
      if (x[j] > mx) {
        mx = x[j];
        arg = j;
      }
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(x[j]) - mx);
    const double lse = mx + std::log(sum);
    total += lse - x[label];
    correct += arg == label;
    if (d)
      for (int64_t j = 0; j < c; ++j)
        d[j] = static_cast<float>((std::exp(x[j] - lse) - (j == label ? 1.0 : 0.0)) * scale);
  }
  r.loss = total * scale;
  r.correct = correct;
  return r;
}

Expected<LossValue> mse_loss(const Tensor& y, const Tensor& target, Tensor* dy) {
  if (y.numel() != target.numel())
    return Status::invalid("MSE: output " + shape_str(y.shape()) + " and target " + shape_str(target.shape()) + " differ");
  LossValue r;
  double total = 0;
  const double n = static_cast<double>(y.numel());
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double diff = static_cast<double>(y.f32()[i]) - target.get(i);
    total += diff * diff;
    if (dy) dy->f32()[i] = static_cast<float>(2.0 * diff / n);
  }
  r.loss = total / n;
  return r;
}

}  // namespace mosaic
