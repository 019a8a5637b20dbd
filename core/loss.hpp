// Training losses applied to a model output, with their gradients. All reduce by the mean,
// as PyTorch's CrossEntropyLoss (over the rows not ignored) and MSELoss do by default.
#pragma once

#include <string>

#include "ir/device.hpp"
#include "ir/status.hpp"
#include "ir/tensor.hpp"

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

/// Mean squared error against one-hot targets over the rows not ignored (labels as for
/// softmax_cross_entropy): loss = mean over the counted rows and the C classes of
/// (x - onehot(label))^2, PyTorch's MSELoss(logits, one_hot(labels).float()) on those rows;
/// dlogits = 2 (x - onehot) / (counted C), 0 on ignored rows; `correct` counts arg-max hits.
Expected<LossValue> mse_one_hot(const Tensor& logits, const Tensor& labels, Tensor* dlogits,
                                int64_t ignore_index = kIgnoreIndex);

/// The training losses by name: "cross-entropy" (softmax_cross_entropy) or "mse"
/// (mse_one_hot); another name is an error naming --loss.
Expected<LossValue> class_loss(const std::string& loss, const Tensor& logits, const Tensor& labels, Tensor* dlogits);

/// What the loss named `loss` ("cross-entropy" or "mse", as class_loss) needs of logits of
/// shape `logits` and their labels, checked as those functions check them: the rule a device
/// computes it by (Device::class_loss: rows, classes, the mean's scale), and in *counted the
/// rows not ignored.
Expected<LossRule> loss_rule(const std::string& loss, const Shape& logits, const Tensor& labels, int64_t* counted,
                             int64_t ignore_index = kIgnoreIndex);

/// Mean squared error over all elements: loss = mean((y - t)^2); dy = 2 (y - t) / numel.
Expected<LossValue> mse_loss(const Tensor& y, const Tensor& target, Tensor* dy);

}  // namespace mosaic
