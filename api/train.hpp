// train as a library function: load a model and a dataset, place it (one backend or a mixed
// placement), train with an optimizer, evaluate, and return the log (docs/api.md). `mosaic
// train` is this call plus the --json file and the results store.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/util.hpp"
#include "backends/registry.hpp"
#include "core/optimizer.hpp"

namespace mosaic {
struct DataSplits;
}

namespace mosaic::api {

struct TrainOptions {
  /// Drawn before "epoch E/N" on the progress line even when not verbose (a sweep's
  /// "sweep NAME: cell 3/12 ..."), so that a long cell shows its epoch and step.
  std::string progress_label;
  std::string model, data = "fashion-mnist", backend = default_backend(), optimizer = "sgd", json;
  std::string assign;  ///< a mixed placement instead of --backend (bench --assign syntax or a YAML file)
  std::string lr_schedule = "constant";
  /// Token data (text:FILE, synthetic-tokens:...): next-token (GPT) or masked-lm (BERT).
  std::string objective = "next-token";
  /// The loss against the labels: cross-entropy (softmax over the last axis) or mse (against
  /// one-hot targets), per row, over the rows not ignored (core/loss.hpp).
  std::string loss = "cross-entropy";
  std::string save;  ///< write the trained model (ONNX) here
  std::string checkpoint;  ///< write a checkpoint here at every epoch end (api/checkpoint.hpp)
  std::string resume;      ///< continue from this checkpoint
  std::string trace;  ///< Chrome trace-event file of every step (nodes, stages, data loading)
  OptimizerConfig opt;
  std::vector<std::string> plugins;     ///< --optimizer-plugin libraries
  std::vector<std::string> opt_params;  ///< --opt key=value (OptimizerConfig::extra)
  std::vector<std::string> freeze;      ///< parameters kept fixed: names or regexes
  std::string normalize = "none";       ///< none, auto, or MEAN[,MEAN..]:STD[,STD..]
  bool prefetch = true;                 ///< background loader thread
  int64_t batch = 64, epochs = 1, steps = 0, eval_batch = 500;
  int64_t steps_per_epoch = 0;  ///< cut every epoch short (timing sweeps); 0: whole epochs
  bool shuffle = true;
  bool evaluate = true;  ///< test accuracy after each epoch
  bool deterministic = false;  ///< bitwise-repeatable plans at a fixed thread count
  /// "f32", or "bf16": mixed precision (core/kernel.hpp Precision): convolutions and matrix
  /// products, forward and backward, read bfloat16 copies of their operands and accumulate in
  /// float32; parameters, gradients and optimizer state stay float32. The test set is
  /// evaluated in bf16, and after the last epoch also in float32 with the same weights: the
  /// log's "bf16" entry gives both accuracies and their top-1 agreement. Every backend asked
  /// for must accept bf16 (onednn on a CPU with bfloat16 dot products).
  std::string precision = "f32";
  uint64_t seed = 0;
  int threads = 0;
  double target_accuracy = 0;  ///< > 0: record the training time until the test accuracy reaches it
  int64_t data_repeat = 1;  ///< the training set concatenated this many times (dataset-size scaling)
  /// Data-parallel over MPI (docs/distributed.md): "" (one process, as always), allreduce,
  /// allreduce-blocking, avg, ps, ps-async. `batch` is then the per-worker batch.
  std::string distributed;
  double bucket_mb = 25;  ///< gradient bucket size of the all-reduce modes
  std::string collective = "auto";  ///< how the all-reduce modes sum: ring, shm or auto
  int64_t sync_every = 1;  ///< avg: average the parameters every this many steps
  int servers = 1;         ///< ps, ps-async: server ranks (the last ones)
  int64_t max_staleness = -1;  ///< ps-async: bounded staleness (-1: unbounded)
  DbOptions db;  ///< results store the CLI records the run in (train_model records nothing)
  /// Called on rank 0 after each finished epoch with the log so far (the CLI writes it to
  /// --json, so that a run killed later, by mpirun's SIGKILL or the OOM killer, leaves its
  /// finished epochs behind).
  std::function<void(const nlohmann::json& log)> on_epoch_done;
};

/// "Does not train": after the first epoch (of at least kChanceMinSteps steps) the train
/// loss is still at least kChanceLossShare x ln(classes) (a uniform guess) and the train
/// accuracy at most kChanceAccuracyFactor / classes. Returns the explanation, or "" when
/// the run trains.
inline constexpr double kChanceLossShare = 0.95, kChanceAccuracyFactor = 1.5;
inline constexpr int64_t kChanceMinSteps = 50;
std::string chance_level(double train_loss, double train_accuracy, int64_t classes);

/// Loads --optimizer-plugin libraries and parses --opt key=value into config.extra. If
/// `optimizer` is empty it becomes the (single) plugin's optimizer, else "sgd".
Status apply_optimizer_flags(const std::vector<std::string>& plugins, const std::vector<std::string>& opt_params,
                             OptimizerConfig& config, std::string& optimizer);

struct TrainResult {
  nlohmann::json log;            ///< what --json writes: settings, per-step losses, per-epoch results
  std::string diverged;          ///< "diverged at epoch E step S" or empty
  std::vector<std::string> fallbacks;
  int rank = 0;  ///< this process's rank in a data-parallel run (only rank 0 writes files)
};

/// Trains as `mosaic train` does (printing progress when verbose); `preloaded` data, if
/// given, is used instead of loading o.data. Errors for bad input; divergence is a result.
/// Under mpirun with o.distributed set, every rank calls it (rank 0's result has the log);
/// MPI stays running for later calls: end it with dist::Comm::finalize() before exit.
Expected<TrainResult> train_model(const TrainOptions& o, const DataSplits* preloaded, bool verbose);
/// What train checks before it runs anything, alone: the model loads at o.batch, its data
/// (`preloaded`, else o.data, token data made for the model) loads, and the data's batches fit
/// the model's input and its labels the logits. A sweep runs it for every model before its
/// first cell.
Status check_training_data(const TrainOptions& o, const DataSplits* preloaded);
/// train_model(o, nullptr, false): the library entry point.
inline Expected<TrainResult> train(const TrainOptions& o) { return train_model(o, nullptr, false); }

}  // namespace mosaic::api
