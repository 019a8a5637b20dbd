// `mosaic train`, `gradcheck`, `optcheck` and `sweep`: the CLI over api/train.hpp and
// api/gradcheck.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/gradcheck.hpp"
#include "api/train.hpp"
#include "backends/registry.hpp"
#include "core/optimizer.hpp"
#include "frontends/cli/cli_util.hpp"

namespace mosaic::cli {

struct OptcheckCliOptions {
  std::string optimizer, reference, model = "zoo:fmnist-cnn", backend = "naive", json, junit;
  std::string onnx_data = "/usr/share/libonnx-testdata/data/node";
  std::vector<std::string> plugins, opt_params;
  OptimizerConfig opt;
  bool lr_given = false;
  int64_t steps = 30;
  double tolerance = 1e-4;
  uint64_t seed = 1;
  int threads = 0;
};

int run_train(const TrainOptions& o);
int run_optcheck(const OptcheckCliOptions& o);

struct SweepOptions {
  std::string config;
  int max_cells = 0;  ///< run at most this many new cells, then stop (0: all)
  int max_grid = 1000;  ///< a grid of more cells is refused before anything runs
  DbOptions db;       ///< results store the sweep (all its finished cells) is recorded in
};
int run_sweep(const SweepOptions& o);
int run_gradcheck(const GradcheckRunOptions& o);

}  // namespace mosaic::cli
