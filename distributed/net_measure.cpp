#include "distributed/net_measure.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/events.hpp"
#include "distributed/ring_allreduce.hpp"
#include "distributed/shm_allreduce.hpp"
#include <thread>

namespace mosaic::dist {
namespace {

double seconds_now() { return static_cast<double>(now_ns()) / 1e9; }

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// Repetitions so that a size's measurement lasts about 50 ms (at least 3, at most 200),
/// agreed on by every rank (rank 0's first timing decides).
int repetitions(Comm& comm, double first_s) {
  double reps = first_s > 0 ? 0.05 / first_s : 200;
  comm.broadcast(&reps, sizeof reps, 0);
  return std::clamp(static_cast<int>(reps), 3, 200);
}

/// The median over repetitions of `collective`'s time on the slowest rank (after a warm-up).
double median_collective_s(Comm& comm, const std::function<void()>& collective) {
  auto once = [&] {
    const double t0 = seconds_now();
    collective();
    double worst = seconds_now() - t0;
    for (double x : comm.all_gather(std::vector<double>{worst})) worst = std::max(worst, x);
    return worst;
  };
  once();
  const int reps = repetitions(comm, once());
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(once());
  return median_of(t);
}

/// Ping-pong between ranks 0 and 1 at each size (after a warm-up, repeated for about 50 ms):
/// (bytes, one-way seconds = median round trip / 2), rank 0's medians broadcast to every rank.
std::vector<std::pair<double, double>> time_pingpong(Comm& comm, const std::vector<int64_t>& sizes, int64_t max_bytes) {
  const int rank = comm.rank();
  std::vector<char> buf(static_cast<size_t>(max_bytes)), back(static_cast<size_t>(max_bytes));
  auto pingpong = [&](int64_t m) {
    const double t0 = seconds_now();
    if (rank == 0) {
      comm.wait(comm.isend(buf.data(), static_cast<size_t>(m), 1, 7));
      comm.wait(comm.irecv(back.data(), static_cast<size_t>(m), 1, 8));
    } else if (rank == 1) {
      comm.wait(comm.irecv(back.data(), static_cast<size_t>(m), 0, 7));
      comm.wait(comm.isend(buf.data(), static_cast<size_t>(m), 0, 8));
    }
    return (seconds_now() - t0) / 2;
  };
  std::vector<std::pair<double, double>> points;
  for (int64_t m : sizes) {
    pingpong(m);  // warm-up
    const int reps = repetitions(comm, pingpong(m));
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) t.push_back(pingpong(m));
    double med = median_of(t);
    comm.broadcast(&med, sizeof med, 0);
    points.emplace_back(static_cast<double>(m), med);
  }
  return points;
}

/// Mosaic's shared-memory all-reduce over every rank (all on one node) at each size from 1 MiB:
/// (bytes, median seconds).
Expected<std::vector<std::pair<double, double>>> time_shm_allreduce(Comm& comm, const std::vector<int64_t>& sizes) {
  std::vector<std::pair<double, double>> points;
  for (int64_t m : sizes) {
    if (m < 1 << 20) continue;
    MOSAIC_ASSIGN_OR_RETURN(auto shm, ShmAllreduce::create(comm, {m / 4}));
    const double med = median_collective_s(comm, [&] {
      shm->begin_step();
      shm->ready(0);
      while (!shm->progress(1.f)) std::this_thread::yield();
    });
    points.emplace_back(static_cast<double>(m), med);
  }
  return points;
}

/// The measured points beside the fitted model, a row per size, and the fit's line.
std::string format_table(const std::vector<std::pair<double, double>>& points, const nlohmann::json& samples, double alpha,
                         double bandwidth, const NetworkProfile& p, int n, bool one_host, bool shm) {
  char line[256];
  std::string table = "size          one-way (measured / fit)      ring all-reduce over " + std::to_string(n) +
                      " ranks (measured / fit)" + (shm ? "   shm all-reduce (measured / fit)" : "") + "\n";
  for (size_t i = 0; i < points.size(); ++i) {
    const double m = points[i].first;
    std::snprintf(line, sizeof line, "%-12.0f  %10.2f / %-10.2f us", m, 1e6 * points[i].second, 1e6 * (alpha + m / bandwidth));
    table += line;
    for (const auto& a : samples["allreduce"])
      if (a["bytes"].get<double>() == m) {
        std::snprintf(line, sizeof line, "   %10.3f / %-10.3f ms", 1e3 * a["seconds"].get<double>(), 1e3 * a["fit_seconds"].get<double>());
        table += line;
      }
    for (const auto& a : samples["shm_allreduce"])
      if (a["bytes"].get<double>() == m) {
        std::snprintf(line, sizeof line, "     %10.3f / %-10.3f ms", 1e3 * a["seconds"].get<double>(), 1e3 * a["fit_seconds"].get<double>());
        table += line;
      }
    table += "\n";
  }
  std::snprintf(line, sizeof line,
                "fit: latency %.2f us, bandwidth %.2f GB/s, reduction %.2f GB/s%s, shm all-reduce %.2f GB/s (%d ranks, %s, "
                "oversubscription %.2g)\n", 1e6 * alpha, bandwidth / 1e9, p.reduce_bps / 1e9, p.cpu_driven ? ", CPU-driven" : "",
                p.shm_bps / 1e9, n,
                one_host ? "one host" : "several hosts", p.measured_oversubscription);
  table += line;
  return table;
}

}  // namespace

Expected<std::pair<double, double>> fit_link(const std::vector<std::pair<double, double>>& points) {
  // Latency from the smallest messages; bandwidth = bytes / time over the messages of 1 MiB
  // and more, so the largest (the size of real gradient buckets) weigh most.
  std::vector<double> small;
  for (const auto& [m, t] : points)
    if (m <= 1024) small.push_back(t);
  if (small.empty()) return Status::invalid("simulate --measure-network: no message of 1 KiB or less was timed");
  const double alpha = median_of(small);
  double big_bytes = 0, big_s = 0;
  for (const auto& [m, t] : points) {
    if (m < 1 << 20) continue;
    if (t <= alpha) {
      char what[256];
      std::snprintf(what, sizeof what,
                    "simulate --measure-network: a %.0f-byte message took %.2f us one way, no longer than the %.2f us "
                    "latency the small ones measured: the ranks were descheduled while they were timed (another process "
                    "on these cores?); measure on an idle machine",
                    m, 1e6 * t, 1e6 * alpha);
      return Status::invalid(what);
    }
    big_bytes += m, big_s += t - alpha;
  }
  if (big_bytes == 0) return Status::invalid("simulate --measure-network: --max-mb must be at least 1");
  return std::make_pair(alpha, big_bytes / big_s);
}

Expected<NetworkMeasurement> measure_network(Comm& comm, int64_t max_bytes) {
  const int n = comm.size();
  if (n < 2)
    return Status::invalid("simulate --measure-network needs at least 2 ranks: run it under mpirun -np 2 (or more)");
  std::vector<int64_t> sizes;
  for (int64_t m = 8; m <= max_bytes; m *= 4) sizes.push_back(m);
  // A sweep timed while the ranks were descheduled (another process on these cores: a
  // "latency" of a scheduler's time slice, longer than a large message takes) is timed again,
  // up to kPingpongSweeps in all, before it is refused. Every rank judges the same broadcast
  // medians, so all of them time again together.
  constexpr int kPingpongSweeps = 3;
  std::vector<std::pair<double, double>> points;  // (bytes, one-way seconds)
  Expected<std::pair<double, double>> fitted = Status::internal("simulate --measure-network: nothing timed");
  std::string retried;
  for (int sweep = 1; sweep <= kPingpongSweeps; ++sweep) {
    points = time_pingpong(comm, sizes, max_bytes);
    fitted = fit_link(points);
    if (fitted.ok() || max_bytes < (1 << 20)) break;  // below 1 MiB: --max-mb, not the machine
    retried += "note: sweep " + std::to_string(sweep) + " of " + std::to_string(kPingpongSweeps) +
               " refused (" + fitted.status().message() + ")\n";
  }
  MOSAIC_ASSIGN_OR_RETURN(const auto fit, std::move(fitted));
  nlohmann::json samples = {{"pingpong", nlohmann::json::array()}, {"allreduce", nlohmann::json::array()}};
  const double alpha = fit.first, bandwidth = fit.second;
  for (const auto& [m, t] : points)
    samples["pingpong"].push_back({{"bytes", m}, {"seconds", t}, {"fit_seconds", alpha + m / bandwidth}});

  // The ring all-reduce over every rank; what the transfers do not explain is the reduction.
  const auto hosts = comm.all_gather(static_cast<uint64_t>(std::hash<std::string>{}(comm.host())));
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](uint64_t h) { return h == hosts[0]; });
  NetworkProfile p;
  p.name = one_host ? "measured-shm" : "measured";
  p.latency_s = alpha;
  p.bandwidth_bps = bandwidth;
  p.cpu_driven = one_host;  // on one host Open MPI's shared-memory transport copies with the CPU
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (one_host && cores > 0) p.measured_oversubscription = std::max(1.0, static_cast<double>(n) / static_cast<double>(cores));
  std::vector<float> data(static_cast<size_t>(max_bytes / 4));
  double reduced_bytes = 0, reduce_s = 0;
  std::vector<std::pair<double, double>> ring_points;
  for (int64_t m : sizes) {
    if (m < 1 << 20) continue;
    const double med = median_collective_s(comm, [&] {
      RingAllreduce r(comm, 900);
      r.start({{data.data(), m / 4}}, 1.f);
      r.finish();
    });
    const double s = static_cast<double>(m);
    ring_points.emplace_back(s, med);
    const double transfers = 2.0 * (n - 1) * (alpha + s / n / bandwidth);
    if (med > transfers) reduced_bytes += (n - 1) * s / n, reduce_s += med - transfers;
  }
  // Bytes-weighted like the bandwidth; no measurable reduction cost: far above the link's rate.
  p.reduce_bps = reduce_s > 0 ? reduced_bytes / reduce_s : 1e3 * bandwidth;

  // Mosaic's shared-memory all-reduce, where every rank shares the node: its rate over the
  // bytes that latency does not explain.
  std::vector<std::pair<double, double>> shm_points;
  if (comm.one_node()) {
    MOSAIC_ASSIGN_OR_RETURN(shm_points, time_shm_allreduce(comm, sizes));
    double shm_bytes = 0, shm_s = 0;
    for (const auto& [bytes, med] : shm_points) shm_bytes += bytes, shm_s += std::max(med - 2 * alpha, 1e-12);
    p.shm_bps = shm_s > 0 ? shm_bytes / shm_s : 0;
  }
  Topology topo;
  topo.ranks_per_node = n;
  topo.cores_per_node = static_cast<int>(std::max(cores, 1L));
  topo.intra = p;
  for (const auto& [s, t] : ring_points) {
    const double fit = allreduce_cost(static_cast<int64_t>(s), topo, Collective::kRing).total();
    samples["allreduce"].push_back({{"bytes", s}, {"ranks", n}, {"seconds", t}, {"fit_seconds", fit}});
  }
  samples["shm_allreduce"] = nlohmann::json::array();
  for (const auto& [s, t] : shm_points) {
    const double fit = allreduce_cost(static_cast<int64_t>(s), topo, Collective::kShm).total();
    samples["shm_allreduce"].push_back({{"bytes", s}, {"ranks", n}, {"seconds", t}, {"fit_seconds", fit}});
  }
  const std::string table = format_table(points, samples, alpha, bandwidth, p, n, one_host, !shm_points.empty());
  p.source = "measured with mosaic simulate --measure-network over " + std::to_string(n) + " ranks" +
             (one_host ? " on one host" : "");
  return NetworkMeasurement{p, samples.dump(), retried + table};
}

}  // namespace mosaic::dist
