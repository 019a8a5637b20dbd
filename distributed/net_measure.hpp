// `mosaic simulate --measure-network`: measures this job's links over MPI (ping-pong between
// ranks 0 and 1, then Mosaic's own ring all-reduce over all ranks at several sizes) and fits
// the cost model's latency, bandwidth and reduction rate (docs/distributed.md).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "distributed/comm.hpp"
#include "distributed/cost_model.hpp"

namespace mosaic::dist {

struct NetworkMeasurement {
  NetworkProfile profile;
  std::string samples_json;  ///< every size's measured and fitted time
  std::string table;         ///< the same, for the console
};

/// The link's latency (seconds) and bandwidth (bytes/s) from one-way times (bytes, seconds):
/// the latency from the messages of 1 KiB and less, the bandwidth from those of 1 MiB and more,
/// bytes over the time latency does not explain. Refused when a large message took no longer
/// than the latency: the ranks were descheduled while the small ones were timed (another
/// process on these cores), and the fit would be a bandwidth without bound.
Expected<std::pair<double, double>> fit_link(const std::vector<std::pair<double, double>>& points);

/// Collective over `comm` (at least two ranks). `max_bytes` bounds the largest message.
Expected<NetworkMeasurement> measure_network(Comm& comm, int64_t max_bytes);

}  // namespace mosaic::dist
