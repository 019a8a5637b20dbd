// The largest batch that fits in memory, per configuration (bench's find_max_batch). The
// memory accounting of plans built without allocating (cheap at any batch) predicts it by
// bisection; a real run at that batch (allocate, one iteration or training step) confirms it,
// and steps down if the run does not fit. `mosaic bench --find-max-batch` prints the report,
// a sweep's `batch: max` uses largest_batch. docs/cli.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "api/bench.hpp"

namespace mosaic::api {

/// The search for every configuration of `o` (its backends or placement, mode, optimizer),
/// within o.memory_limit ("4G"; empty: 90% of MemAvailable): the mosaic.max-batch/1 document
/// (docs/json-schema.md), a configuration that cannot run even batch 1 with its "error".
/// `on_config` sees each configuration's entry as it is found, with the document so far.
Expected<nlohmann::json> find_max_batch(
    const BenchOptions& o, const std::function<void(const nlohmann::json& doc, const nlohmann::json& config)>& on_config = {});
/// The largest batch of o.model (in o.mode, with o.optimizer) that fits in `limit` bytes
/// (0: 90% of the available memory) on `placement`.
Expected<int64_t> largest_batch(const BenchOptions& o, const Placement& placement, int64_t limit);
/// 90% of MemAvailable (0 when /proc/meminfo cannot be read): the limit when none is given.
int64_t default_memory_limit();
/// "512M", "4G", "1.5GiB", "1000" (bytes) -> bytes; errors name memory_limit.
Expected<int64_t> parse_bytes(const std::string& text);

}  // namespace mosaic::api
