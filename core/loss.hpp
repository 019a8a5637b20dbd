// Training losses applied to a model output, with their gradients. Both reduce by the mean,
// as PyTorch's CrossEntropyLoss (over the rows not ignored) and MSELoss do by default.
#pragma once

#include <string>

#include "core/status.hpp"
#include "core/tensor.hpp"

namespace mosaic {

struct LossValue {
  double loss = 0;
  int64_t correct = 0;  ///< softmax cross-entropy: rows whose arg-max equals the label
  int64_t counted = 0;  ///< softmax cross-entropy: rows whose label is not the ignore index
};

/// PyTorch's CrossEntropyLoss default ignore_index: labels equal to it contribute nothing.
inline constexpr int64_t kIgnoreIndex = -100;

/// Softmax fused with cross-entropy over the last axis of logits ([N, C], or per token
/// [N, T, V]) with int64 labels of the leading shape ([N], [N, T]) in [0, C) or equal to
/// `ignore_index`: loss = mean over the counted rows of logsumexp(x) - x[label];
/// dlogits = (softmax(x) - onehot) / counted, 0 on ignored rows. `dlogits` may be null.
/// Labels out of range are an error naming the element; with every row ignored the loss
/// is 0 (PyTorch returns NaN).
Expected<LossValue> softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                          int64_t ignore_index = kIgnoreIndex);

/// Mean squared error over all elements: loss = mean((y - t)^2); dy = 2 (y - t) / numel.
Expected<LossValue> mse_loss(const Tensor& y, const Tensor& target, Tensor* dy);

}  // namespace mosaic
