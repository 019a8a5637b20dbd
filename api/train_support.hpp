// Pieces of `mosaic train` around the training loop: the data a model trains on, the settings
// every rank (and every resumed run) must share, the data-parallel summary it prints, and a
// classifier's evaluation over a data set (which `mosaic quantize` shares).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/train.hpp"
#include "core/plan.hpp"
#include "frontends/data/dataset.hpp"

namespace mosaic::api {

/// o.data for the model `g` (prepared at o.batch): token data made for its sequence length
/// and vocabulary, else images.
Expected<DataSplits> load_training_data(const Graph& g, const TrainOptions& o);
/// Whether the data's batches fit the model's input and its labels the model's logits:
/// [batch, classes], or for token data one row per position [batch, T, vocabulary].
Status data_fits(const Graph& g, const TrainOptions& o, const DataSplits& d);

/// What every rank of a data-parallel run must agree on, as one string.
std::string train_settings(const TrainOptions& o);
/// What a checkpoint must have been written with for --resume to continue the same run.
nlohmann::json checkpoint_settings(const TrainOptions& o, const std::string& optimizer, int ranks);
/// The data-parallel summary: global and per-rank throughput, communication, traffic.
void print_distributed(const nlohmann::json& d, int64_t batch);

/// Appends the top-1 class (argmax over the last axis) of each row of `logits` whose label is
/// not kIgnoreIndex; `labels` has one entry per row.
void append_top1(const Tensor& logits, const Tensor& labels, std::vector<int64_t>* out);

/// A classifier's counts over some rows of a data set.
struct EvalCounts {
  double correct = 0, rows = 0, loss_sum = 0;  ///< top-1 hits, scored rows, the loss summed over them
};
/// Runs `plan` (input 0: a batch of d's images; output 0: logits, or per-position logits for
/// token data) over d's rows [lo, hi), normalised by `norm`: the batches in order, the last
/// one padded with zeros whose rows are not scored. `loss` is core/loss.hpp's class_loss
/// name. `predictions`, if given, receives the top-1 class of every scored row, in order.
Expected<EvalCounts> evaluate_rows(Plan& plan, const Dataset& d, int64_t lo, int64_t hi, const Normalization& norm,
                                   const std::string& loss, std::vector<int64_t>* predictions);

}  // namespace mosaic::api
