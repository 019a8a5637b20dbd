// The data-parallel axes of a sweep (ranks, mode): running one cell under mpirun,
// and the speed-up table over worker counts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/train.hpp"

namespace mosaic::api {

/// Runs `mosaic train` (this executable) under `mpirun -np workers [+ servers]` with
/// `--distributed t.distributed`, writing its JSON in `workdir`; the result as train_model's.
/// Exit code 1 (diverged) is a result; any other failure is an error carrying the tail of
/// the job's output.
Expected<TrainResult> train_under_mpirun(const TrainOptions& t, int64_t workers, const std::string& workdir);

/// One finished cell of a ranks sweep, as the speed-up table needs it.
struct ScalingCell {
  std::string row;   ///< "model | backend | optimizer | lr | batch" (everything but ranks and mode)
  std::string mode;
  int64_t ranks = 0;
  double images_per_s = 0;  ///< global; after the first epoch when there are several
  std::string status;
};

/// A number as the sweep's tables and cell keys print it (shortest stream form: 0.01, 1e+30).
std::string sweep_number(double v);

/// Global images/s of a train log: the mean over epochs 2.. when there are several (the
/// first carries the warm-up), else epoch 1's; 0 when there is none.
double steady_images_per_s(const nlohmann::json& log);

/// OUTPUT/table_speedup.{csv,md}: per row and mode, images/s (sequences/s with `tokens`) by
/// worker count, speed-up against 1 worker of the same mode (the data-parallel benchmark's:
/// throughput on n / throughput on 1) and efficiency (speed-up / n).
Status write_speedup_table(const std::string& output, const std::string& name, const std::string& provenance,
                           const std::vector<int64_t>& ranks, const std::vector<ScalingCell>& cells, bool tokens);

}  // namespace mosaic::api
