// Training checkpoints: everything `train --resume` needs to continue a run as if it had
// never stopped. Written at the end of every epoch (`train --checkpoint FILE`).
//
// File: the 8 bytes "MOSAICK1", a little-endian uint64 header length, the header (JSON:
// schema mosaic.checkpoint/1, the run's settings, completed epochs, step, optimizer step
// count, the training log so far, and the list of tensors with their shapes), then the raw
// float32 data of every listed tensor and optimizer state buffer, in header order. It is
// written to FILE.tmp and renamed, so a crash never leaves a half-written checkpoint.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/optimizer.hpp"
#include "core/plan.hpp"

namespace mosaic::api {

struct Checkpoint {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::vector<float>> values;  ///< the model's float initializers, by name
  std::vector<std::vector<std::vector<float>>> optimizer_state;  ///< per parameter, per buffer
};

/// Writes the plan's float initializers (trained parameters, running statistics) and the
/// optimizer's state; `header` holds the caller's fields (settings, epoch, step, log, ...).
Status write_checkpoint(const std::string& path, nlohmann::json header, const Plan& plan, const Optimizer& optimizer);
Expected<Checkpoint> read_checkpoint(const std::string& path);
/// Checks that `settings` (this run's) agree with the checkpoint's on every key they share;
/// the error names the first key that differs, with both values.
Status check_settings(const std::string& path, const Checkpoint& c, const nlohmann::json& settings);
/// Copies the checkpoint's values into the plan (every name must exist, with its size) and
/// its state into the optimizer.
Status restore_checkpoint(const std::string& path, const Checkpoint& c, Plan& plan, Optimizer& optimizer);

}  // namespace mosaic::api
