// Pieces of `mosaic train` around the training loop: the settings every rank (and every
// resumed run) must share, and the data-parallel summary it prints.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "api/train.hpp"

namespace mosaic::api {

/// What every rank of a data-parallel run must agree on, as one string.
std::string train_settings(const TrainOptions& o);
/// What a checkpoint must have been written with for --resume to continue the same run.
nlohmann::json checkpoint_settings(const TrainOptions& o, const std::string& optimizer, int ranks);
/// The data-parallel summary: global and per-rank throughput, communication, traffic.
void print_distributed(const nlohmann::json& d, int64_t batch);

}  // namespace mosaic::api
