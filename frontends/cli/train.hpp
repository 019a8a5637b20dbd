// `mosaic train` and `mosaic gradcheck`.
#pragma once

#include <cstdint>
#include <string>

#include "core/gradcheck.hpp"
#include "core/optimizer.hpp"

namespace mosaic::cli {

struct TrainOptions {
  std::string model, data = "fashion-mnist", backend = "naive", optimizer = "sgd", json;
  std::string lr_schedule = "constant";
  std::string save;  ///< write the trained model (ONNX) here
  OptimizerConfig opt;
  int64_t batch = 64, epochs = 1, steps = 0, eval_batch = 500;
  bool shuffle = true;
  bool evaluate = true;  ///< test accuracy after each epoch
  uint64_t seed = 0;
  int threads = 0;
};

struct GradcheckCliOptions {
  std::string model, backend = "naive";
  int64_t batch = 2;
  int threads = 0;
  GradcheckOptions check;
};

int run_train(const TrainOptions& o);
int run_gradcheck(const GradcheckCliOptions& o);

}  // namespace mosaic::cli
