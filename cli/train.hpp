// `mosaic train`, `gradcheck`, `optcheck` and `sweep`: the CLI over api/train.hpp and
// api/gradcheck.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/gradcheck.hpp"
#include "api/sweep.hpp"
#include "api/train.hpp"
#include "backends/registry.hpp"
#include "core/optimizer.hpp"
#include "cli/cli_util.hpp"

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

/// `mosaic sweep`: api::sweep's query and the results store the sweep is recorded in.
struct SweepOptions : api::SweepQuery {
  DbOptions db;
};
int run_sweep(const SweepOptions& o);
int run_gradcheck(const GradcheckRunOptions& o);

}  // namespace mosaic::cli
