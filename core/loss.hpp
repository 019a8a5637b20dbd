// Training losses applied to a model output, with their gradients. Both reduce by the mean,
// as PyTorch's CrossEntropyLoss and MSELoss do by default.
#pragma once

#include <string>

#include "core/status.hpp"
#include "core/tensor.hpp"

namespace mosaic {

struct LossValue {
  double loss = 0;
  int64_t correct = 0;  ///< softmax cross-entropy: rows whose arg-max equals the label
};

/// Softmax fused with cross-entropy on logits [N, C] and int64 labels [N] in [0, C):
/// loss = mean_n(logsumexp(x_n) - x_n[label_n]); dlogits = (softmax(x) - onehot) / N.
/// `dlogits` may be null. Labels out of range are an error.
Expected<LossValue> softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* dlogits);

/// Mean squared error over all elements: loss = mean((y - t)^2); dy = 2 (y - t) / numel.
Expected<LossValue> mse_loss(const Tensor& y, const Tensor& target, Tensor* dy);

}  // namespace mosaic
