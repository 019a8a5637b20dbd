// The training loop behind api::train_model: one rank's run, from the options to the log.
#pragma once

#include "api/train.hpp"

namespace mosaic::dist {
class DataParallel;
}

namespace mosaic::api {

/// Trains as train_model does, on this process (dp null) or as one rank of a data-parallel
/// group (a worker, or a parameter server that serves until the workers stop). The options'
/// numbers are checked by train_model before.
Expected<TrainResult> run_training(const TrainOptions& o, const DataSplits* preloaded, bool verbose,
                                   dist::DataParallel* dp);

}  // namespace mosaic::api
