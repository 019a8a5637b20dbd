// Sweep configuration from YAML: a grid of training runs (models x backends x
// optimizers x learning rates x batch sizes) and the tables to write from them.
// docs/sweeps.md describes every key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

struct SweepConfig {
  std::string file;    ///< the YAML file (for messages)
  std::string name;    ///< sweep name (table titles)
  std::string output;  ///< directory of results.sqlite and the tables (relative: to the YAML file)
  std::string data = "fashion-mnist";
  /// Each `backends` entry is a backend, or a mixed placement (is_placement) that cells
  /// train on as `train --assign` does; a relative placement file is relative to the YAML.
  std::vector<std::string> models, backends, optimizers{"sgd"};
  std::vector<double> lrs{0.01};
  /// Batch sizes; kLargestBatch stands for `max`: the largest training batch that fits
  /// in memory, found per model and backend before the grid runs.
  std::vector<int64_t> batches{64};
  static constexpr int64_t kLargestBatch = 0;
  /// The memory `max` must fit in ("512M", "4G"; "": 90% of the available memory).
  std::string memory_limit;
  /// Token data (text:FILE, synthetic-tokens:N,T,V): next-token or masked-lm ("": train's default).
  std::string objective;
  int64_t epochs = 1;
  int64_t steps_per_epoch = 0;  ///< cut each epoch short (0: whole epochs)
  uint64_t seed = 0;
  bool evaluate = true;   ///< test accuracy per epoch
  bool shuffle = true;
  std::string normalize = "none";
  double momentum = 0, weight_decay = 0;
  int threads = 0;
  /// Data-parallel axes: with `ranks`, every cell runs under mpirun with that many workers
  /// (`train --distributed MODE`), for each mode; empty: cells run in this process.
  std::vector<int64_t> ranks;
  std::vector<std::string> modes{"allreduce"};
  int servers = 1;  ///< parameter servers of the ps modes (besides the workers)
  std::vector<int64_t> accuracy_epochs;  ///< Table 3 columns (default: every epoch)
  std::string accuracy = "train";         ///< Table 3 reports train or test accuracy
};

/// Whether a `backends` entry is a mixed placement rather than a backend's name: an
/// --assign spec (Conv=onednn,*=im2col) or a placement YAML file.
bool is_placement(const std::string& backends_entry);

/// Parses and validates; errors name the file and the key.
Expected<SweepConfig> load_sweep_config(const std::string& path);

}  // namespace mosaic
