// `mosaic simulate --measure-network`: measures this job's links over MPI (ping-pong between
// ranks 0 and 1, then Mosaic's own ring all-reduce over all ranks at several sizes) and fits
// the cost model's latency, bandwidth and reduction rate (docs/distributed.md).
#pragma once

#include <string>

#include "distributed/comm.hpp"
#include "distributed/cost_model.hpp"

namespace mosaic::dist {

struct NetworkMeasurement {
  NetworkProfile profile;
  std::string samples_json;  ///< every size's measured and fitted time
  std::string table;         ///< the same, for the console
};

/// Collective over `comm` (at least two ranks). `max_bytes` bounds the largest message.
Expected<NetworkMeasurement> measure_network(Comm& comm, int64_t max_bytes);

}  // namespace mosaic::dist
