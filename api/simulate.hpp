// simulate as a library function: predicted data-parallel throughput, speed-up and
// communication share for 1 to 1024 ranks, from a single-rank training profile (measured now
// in child mosaic processes, or a `bench --mode training` document), the real bucket schedule
// and a network profile (a preset or a file; docs/distributed.md). `mosaic simulate` prints
// the report; `mosaic.simulate` returns it.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/registry.hpp"
#include "ir/status.hpp"

namespace mosaic::api {

struct SimulateQuery {
  /// A model to profile (path or zoo:NAME) or a `bench --mode training` JSON file; ignored when
  /// `profile` holds such a document already.
  std::string input;
  nlohmann::json profile;  ///< a mosaic.bench/2 training report (e.g. mosaic.bench's result)
  std::string backend = default_backend();  ///< backend to profile, or the run to take from the report
  int64_t batch = 32;      ///< per-rank batch when profiling
  int threads = 1, iterations = 10, warmup = 3;
  /// Profile with this many identical training benchmarks at once (all ranks of a node are
  /// busy in data-parallel training); the slowest one's times are used.
  int profile_concurrency = 1;
  std::string network = "shm", intra;  ///< presets or network files; intra defaults to network
  std::vector<int> ranks{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  std::vector<std::string> groups;  ///< "1n1c", "2n8c", ...: nodes x ranks (overrides ranks)
  int ranks_per_node = 1, cores_per_node = 0;
  std::vector<std::string> modes{"allreduce"};
  std::string collective = "mosaic";
  int servers = 1, sync_every = 8;
  double bucket_mb = 25;
  double compute_scale = 1, target_images_per_s = 0;
  int64_t predict_batch = 0;         ///< > 0: scale the profile's compute linearly to this per-rank batch
  std::ostream* progress = nullptr;  ///< where "profiling ..." is said (nothing when null)
};

/// The predictions (schema mosaic.simulate/1, docs/json-schema.md): the one-rank profile, the
/// networks, and per mode and rank group the step, compute, communication, speed-up and what
/// bounds it; a group a mode cannot run has an "error" instead. Errors name the query's field
/// ("groups: '3x' is not NnMc ...", "network: ..."), the file, or the profiling run's failure.
Expected<nlohmann::json> simulate(const SimulateQuery& q);

}  // namespace mosaic::api
