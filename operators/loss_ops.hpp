// ONNX's loss operators, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: a class
// axis 1, targets of shape [N, d1, ...], optional per-class weights, ignore_index, and the
// reductions none / sum / mean (mean: divided by the sum of the weights of the targets not
// ignored). Inference on naive; the training losses of Mosaic's own loop are core/loss.hpp.
#pragma once

#include <map>
#include <string>

#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema;

enum class LossReduction { kNone, kSum, kMean };

struct LossOpParams {
  int64_t n = 1, classes = 1, inner = 1;  ///< scores [n, classes, inner...] as 3-D
  LossReduction reduction = LossReduction::kMean;
  bool has_weight = false, has_ignore = false;
  int64_t ignore_index = 0;
  bool softmax = false;  ///< SoftmaxCrossEntropyLoss: log_softmax over the classes first
};

Expected<LossOpParams> loss_op_params(const OpContext& ctx);
void add_loss_op_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
