#include "core/loss.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace mosaic {

namespace {

/// The rows whose label is not the ignore index, after checking every label is a class in
/// [0, c) or the ignore index (before any arithmetic).
Expected<int64_t> counted_rows(const char* loss, const Tensor& labels, int64_t n, int64_t c, int64_t ignore_index) {
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(labels.get(i));
    if (label == ignore_index) continue;
    if (label < 0 || label >= c)
      return Status::invalid(std::string(loss) + ": label " + std::to_string(label) + " (element " + std::to_string(i) +
                             ") outside [0, " + std::to_string(c) + ")" +
                             (ignore_index < 0 ? " and not the ignore index " + std::to_string(ignore_index) : ""));
    ++counted;
  }
  return counted;
}

/// Logits [N, C] or [N, T, V] and one label per row.
Status check_rows(const char* loss, const Shape& logits, const Tensor& labels, int64_t* n, int64_t* c) {
  if (logits.size() < 2)
    return Status::invalid(std::string(loss) + " needs logits [N, C] or [N, T, V], got " + shape_str(logits));
  *c = logits.back();
  *n = shape_numel(logits) / std::max<int64_t>(*c, 1);
  if (labels.numel() != *n)
    return Status::invalid(std::string(loss) + ": " + std::to_string(labels.numel()) + " labels for " + std::to_string(*n) +
                           " rows of logits " + shape_str(logits));
  return Status::ok();
}

/// Sums row(x, label, d) -> (loss, hit) over the rows not ignored, in parallel (a language
/// model's logits are [N * T, vocabulary]: millions of elements), and zeroes the ignored
/// rows' gradient. d is the row's gradient (null without dlogits).
template <class Row>
LossValue sum_rows(const Tensor& logits, const Tensor& labels, Tensor* dlogits, int64_t n, int64_t c,
                   int64_t ignore_index, const Row& row) {
  double total = 0;
  int64_t correct = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, correct) if (n * c > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(labels.get(i));
    float* d = dlogits ? dlogits->f32() + i * c : nullptr;
    if (label == ignore_index) {
      if (d) std::fill(d, d + c, 0.f);
      continue;
    }
    const auto [loss, hit] = row(logits.f32() + i * c, label, d);
    total += loss;
    correct += hit ? 1 : 0;
  }
  LossValue r;
  r.loss = total;
  r.correct = correct;
  return r;
}

}  // namespace

Expected<LossValue> softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                          int64_t ignore_index) {
  int64_t n = 0, c = 0;
  MOSAIC_RETURN_IF_ERROR(check_rows("cross-entropy", logits.shape(), labels, &n, &c));
  MOSAIC_ASSIGN_OR_RETURN(const int64_t counted, counted_rows("cross-entropy", labels, n, c, ignore_index));
  const double scale = counted > 0 ? 1.0 / static_cast<double>(counted) : 0.0;
  LossValue r = sum_rows(logits, labels, dlogits, n, c, ignore_index, [&](const float* x, int64_t label, float* d) {
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
    if (d)
      for (int64_t j = 0; j < c; ++j)
        d[j] = static_cast<float>((std::exp(x[j] - lse) - (j == label ? 1.0 : 0.0)) * scale);
    return std::pair<double, bool>{lse - x[label], arg == label};
  });
  r.loss *= scale;
  r.counted = counted;
  return r;
}

Expected<LossValue> mse_one_hot(const Tensor& logits, const Tensor& labels, Tensor* dlogits, int64_t ignore_index) {
  int64_t n = 0, c = 0;
  MOSAIC_RETURN_IF_ERROR(check_rows("mse", logits.shape(), labels, &n, &c));
  MOSAIC_ASSIGN_OR_RETURN(const int64_t counted, counted_rows("mse", labels, n, c, ignore_index));
  const double scale = counted > 0 ? 1.0 / (static_cast<double>(counted) * static_cast<double>(c)) : 0.0;
  LossValue r = sum_rows(logits, labels, dlogits, n, c, ignore_index, [&](const float* x, int64_t label, float* d) {
    int64_t arg = 0;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) {
      if (x[j] > x[arg]) arg = j;
      const double diff = static_cast<double>(x[j]) - (j == label ? 1.0 : 0.0);
      sum += diff * diff;
      if (d) d[j] = static_cast<float>(2.0 * diff * scale);
    }
    return std::pair<double, bool>{sum, arg == label};
  });
  r.loss *= scale;
  r.counted = counted;
  return r;
}

Expected<LossValue> class_loss(const std::string& loss, const Tensor& logits, const Tensor& labels, Tensor* dlogits) {
  if (loss == "cross-entropy") return softmax_cross_entropy(logits, labels, dlogits);
  if (loss == "mse") return mse_one_hot(logits, labels, dlogits);
  return Status::invalid("--loss must be cross-entropy or mse, got '" + loss + "'");
}

Expected<LossRule> loss_rule(const std::string& loss, const Shape& logits, const Tensor& labels, int64_t* counted,
                             int64_t ignore_index) {
  LossRule r;
  if (loss == "cross-entropy") r.kind = LossRule::kCrossEntropy;
  else if (loss == "mse") r.kind = LossRule::kMseOneHot;
  else return Status::invalid("--loss must be cross-entropy or mse, got '" + loss + "'");
  MOSAIC_RETURN_IF_ERROR(check_rows(loss.c_str(), logits, labels, &r.rows, &r.classes));
  MOSAIC_ASSIGN_OR_RETURN(*counted, counted_rows(loss.c_str(), labels, r.rows, r.classes, ignore_index));
  const double per = r.kind == LossRule::kCrossEntropy ? 1.0 : static_cast<double>(r.classes);
  r.scale = *counted > 0 ? 1.0 / (static_cast<double>(*counted) * per) : 0.0;
  r.ignore_index = ignore_index;
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
