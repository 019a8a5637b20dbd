#include "distributed/cost_model.hpp"
#include "ir/file_io.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

namespace mosaic::dist {
namespace {

struct Preset {
  const char* name;
  double latency_s, bandwidth_bps;
  bool cpu_driven;
  double reduce_bps;
  const char* source;
  double shm_bps;  // Mosaic's shared-memory all-reduce (one machine only)
};

// Nominal link rates less protocol overhead, and typical MPI small-message latencies; the
// reasoning per line is in docs/distributed.md. reduce_bps is the node's own adding rate.
constexpr Preset kPresets[] = {
    {"shm", 1e-6, 5e9, true, 6e9, "preset: one machine, shared memory copied by the CPU (copy-in/copy-out)", 10e9},
    {"10gbe", 25e-6, 1.17e9, false, 6e9, "preset: 10 Gb/s Ethernet, TCP (94% payload efficiency)", 0},
    {"25gbe", 20e-6, 2.9e9, false, 6e9, "preset: 25 Gb/s Ethernet, TCP", 0},
    {"100gbe", 12e-6, 11.0e9, false, 6e9, "preset: 100 Gb/s Ethernet, TCP", 0},
    {"ib-edr", 1.2e-6, 11.47e9, false, 6e9, "preset: InfiniBand EDR 4x (100 Gb/s) RDMA; 11,470 MB/s as measured in seed 001's cluster", 0},
    {"ib-hdr", 1.0e-6, 23.0e9, false, 6e9, "preset: InfiniBand HDR 4x (200 Gb/s) RDMA", 0},
    {"pcie3-gpu", 8e-6, 10e9, false, 400e9, "preset: GPUs in one node over PCIe 3.0 x16 (NCCL rings; device-side reduction)", 0},
    {"nvlink2-gpu", 5e-6, 40e9, false, 400e9, "preset: V100s in one node over NVLink 2 (NCCL rings; device-side reduction)", 0},
};

double log2_ceil(int n) { return std::ceil(std::log2(static_cast<double>(n)) - 1e-12); }

}  // namespace

std::vector<std::string> network_presets() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

Expected<NetworkProfile> network_preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (name == p.name) {
      NetworkProfile out{p.name, p.latency_s, p.bandwidth_bps, p.cpu_driven, p.reduce_bps, p.source};
      out.shm_bps = p.shm_bps;
      return out;
    }
  std::string known;
  for (const auto& n : network_presets()) known += (known.empty() ? "" : ", ") + n;
  return Status::invalid("unknown network '" + name + "' (presets: " + known + "; or a JSON file from --measure-network)");
}

Expected<NetworkProfile> load_network(const std::string& name_or_file) {
  const bool file = name_or_file.find('/') != std::string::npos || name_or_file.find(".json") != std::string::npos;
  if (!file) return network_preset(name_or_file);
  std::ifstream f(name_or_file);
  if (!f) return Status::not_found(name_or_file + ": cannot open the network profile");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid(name_or_file + ": not a JSON object");
  if (j.value("schema", "") != "mosaic.network/1")
    return Status::invalid(name_or_file + ": not a network profile (schema '" + j.value("schema", "") +
                           "', expected mosaic.network/1)");
  NetworkProfile p;
  for (const char* key : {"latency_s", "bandwidth_bps", "reduce_bps"})
    if (!j.contains(key) || !j[key].is_number() || j[key].get<double>() < 0 ||
        (std::string(key) != "latency_s" && j[key].get<double>() <= 0))
      return Status::invalid(name_or_file + ": '" + key + "' is missing or not a positive number");
  p.name = j.value("name", name_or_file);
  p.latency_s = j["latency_s"];
  p.bandwidth_bps = j["bandwidth_bps"];
  p.reduce_bps = j["reduce_bps"];
  p.cpu_driven = j.value("cpu_driven", false);
  p.measured_oversubscription = std::max(1.0, j.value("oversubscription", 1.0));
  p.shm_bps = std::max(0.0, j.value("shm_bps", 0.0));
  p.source = name_or_file + " (" + j.value("measured", std::string("measured")) + ")";
  return p;
}

Status save_network(const NetworkProfile& p, const std::string& file, const std::string& extra_json) {
  nlohmann::json j = {{"schema", "mosaic.network/1"}, {"name", p.name},         {"latency_s", p.latency_s},
                      {"bandwidth_bps", p.bandwidth_bps}, {"reduce_bps", p.reduce_bps}, {"cpu_driven", p.cpu_driven},
                      {"oversubscription", p.measured_oversubscription}, {"shm_bps", p.shm_bps}, {"measured", p.source}};
  if (!extra_json.empty()) j["samples"] = nlohmann::json::parse(extra_json);
  return write_file_atomic(file, j.dump(2) + "\n");
}

double Topology::oversubscription() const {
  if (cores_per_node <= 0) return 1;
  return std::max(1.0, static_cast<double>(ranks_per_node) * threads_per_rank / cores_per_node);
}

Expected<Collective> parse_collective(const std::string& s) {
  if (s == "ring") return Collective::kRing;
  if (s == "shm") return Collective::kShm;
  if (s == "mosaic") return Collective::kMosaic;
  if (s == "recursive-doubling") return Collective::kRecursiveDoubling;
  if (s == "halving-doubling") return Collective::kHalvingDoubling;
  if (s == "auto") return Collective::kAuto;
  return Status::invalid("unknown collective '" + s + "' (mosaic, ring, shm, recursive-doubling, halving-doubling, auto)");
}

std::string collective_name(Collective c) {
  switch (c) {
    case Collective::kRing: return "ring";
    case Collective::kRecursiveDoubling: return "recursive-doubling";
    case Collective::kHalvingDoubling: return "halving-doubling";
    case Collective::kShm: return "shm";
    case Collective::kMosaic: return "mosaic";
    case Collective::kAuto: return "auto";
  }
  return "?";
}

bool shm_available(const Topology& topo) { return topo.nodes == 1 && topo.intra.shm_bps > 0; }

CommCost allreduce_cost(int64_t bytes, const Topology& topo, Collective algorithm) {
  const int n = topo.ranks();
  if (algorithm == Collective::kMosaic) algorithm = shm_available(topo) ? Collective::kShm : Collective::kRing;
  CommCost c;
  c.algorithm = algorithm;
  if (n < 2 || bytes <= 0) return c;
  if (algorithm == Collective::kAuto) {
    CommCost best;
    double best_t = std::numeric_limits<double>::infinity();
    for (Collective a : {Collective::kRing, Collective::kHalvingDoubling, Collective::kRecursiveDoubling, Collective::kShm}) {
      if (a == Collective::kShm && !shm_available(topo)) continue;
      CommCost t = allreduce_cost(bytes, topo, a);
      if (t.total() < best_t) best = t, best_t = t.total();
    }
    return best;
  }
  const double s = static_cast<double>(bytes);
  const double ov = topo.oversubscription();
  if (algorithm == Collective::kShm) {
    if (!shm_available(topo)) {
      c.latency_s = std::numeric_limits<double>::infinity();
      return c;
    }
    // Two flag handshakes (every copy ready; every share written back), then the rank's
    // share: CPU work, slowed by oversubscription like compute.
    c.latency_s = 2 * topo.intra.latency_s;
    c.reduce_s = s / topo.intra.shm_bps * ov / topo.intra.measured_oversubscription;
    c.cpu_s = c.total();
    return c;
  }
  const double reduce_rate = topo.intra.reduce_bps > 0 ? topo.intra.reduce_bps : 0;
  // A round of `m` bytes between partners `distance` ranks apart (ranks fill node by node).
  auto link = [&](int distance) -> const NetworkProfile& {
    return topo.nodes > 1 && distance >= topo.ranks_per_node ? topo.inter : topo.intra;
  };
  double cpu_transfer = 0;
  auto round = [&](double m, const NetworkProfile& l) {
    c.latency_s += l.latency_s;
    const double t = m / l.bandwidth_bps * (l.cpu_driven ? ov / l.measured_oversubscription : 1);
    c.transfer_s += t;
    if (l.cpu_driven) cpu_transfer += t + l.latency_s;
  };
  auto reduce = [&](double m) {
    if (reduce_rate > 0) c.reduce_s += m / reduce_rate * ov / topo.intra.measured_oversubscription;
  };
  if (algorithm == Collective::kRing) {
    // 2(N-1) rounds of S/N; every hop of the ring carries the same, so the slowest link
    // bounds each round: across nodes the ring has both kinds of hop.
    auto round_time = [&](const NetworkProfile& l) { return l.latency_s + s / n / l.bandwidth_bps; };
    const NetworkProfile& l = topo.nodes > 1 && round_time(topo.inter) >= round_time(topo.intra) ? topo.inter : topo.intra;
    for (int k = 0; k < 2 * (n - 1); ++k) round(s / n, l);
    reduce((n - 1) * s / n);
  } else {
    // Power-of-two core (p ranks); the n - p extra ranks first fold their data into a partner
    // and get the result back at the end (two rounds of S).
    const int p = 1 << static_cast<int>(std::floor(std::log2(static_cast<double>(n)) + 1e-12));
    if (p != n) {
      round(s, link(p));
      reduce(s);
    }
    const int levels = static_cast<int>(log2_ceil(p));
    if (algorithm == Collective::kRecursiveDoubling) {
      for (int k = 0; k < levels; ++k) {  // exchange everything with the partner 2^k away
        round(s, link(1 << k));
        reduce(s);
      }
    } else {
      double m = s;
      for (int k = 0; k < levels; ++k) {  // reduce-scatter by halving, then all-gather by doubling
        m /= 2;
        round(m, link(1 << k));
        reduce(m);
      }
      for (int k = levels - 1; k >= 0; --k, m *= 2) round(m, link(1 << k));
    }
    if (p != n) round(s, link(p));
  }
  c.cpu_s = c.reduce_s + cpu_transfer;
  return c;
}

int64_t StepProfile::gradient_bytes() const {
  int64_t t = 0;
  for (const auto& b : buckets) t += b.bytes;
  return t;
}

void StepProfile::scale_compute(double f, bool optimizer) {
  forward_s *= f, loss_s *= f;
  if (optimizer) optimizer_s *= f;
  for (double& v : backward_step_s) v *= f;
}

double StepProfile::backward_s() const {
  double t = 0;
  for (double v : backward_step_s) t += v;
  return t;
}

Expected<Prediction> simulate_step(const StepProfile& p, const Topology& topo, const SimOptions& o) {
  Prediction r;
  r.ranks = topo.ranks();
  if (r.ranks < 1 || topo.ranks_per_node < 1) return Status::invalid("simulate: need at least one rank");
  const double ov = topo.oversubscription() / p.measured_oversubscription;
  const double fwd = (p.forward_s + p.loss_s) * ov, bwd = p.backward_s() * ov, opt = p.optimizer_s * ov;
  const NetworkProfile& net = topo.nodes > 1 ? topo.inter : topo.intra;
  const int64_t total = p.gradient_bytes();
  r.bound = "compute";
  if (o.mode == "allreduce" || o.mode == "allreduce-blocking" || o.mode == "avg") {
    r.workers = r.ranks;
    r.compute_s = fwd + bwd + opt;
    if (r.ranks == 1) {
      r.step_s = r.compute_s;
    } else if (o.mode == "avg") {
      const CommCost c = allreduce_cost(total, topo, o.algorithm);
      r.algorithm = collective_name(c.algorithm);
      r.comm_s = c.total() / std::max(o.sync_every, 1);
      r.step_s = r.compute_s + r.comm_s;
    } else {
      // Backward runs steps from the last to the first: a bucket is ready once every step
      // from the last down to its ready step has run.
      std::vector<double> after(p.backward_step_s.size() + 1, 0);  // after[s]: backward time to finish step s
      double acc = 0;
      for (size_t s = p.backward_step_s.size(); s-- > 0;) acc += p.backward_step_s[s] * ov, after[s] = acc;
      double net_free = 0, cpu_extra = 0, serial = 0;
      for (const auto& b : p.buckets) {
        const CommCost c = allreduce_cost(b.bytes, topo, o.algorithm);
        r.algorithm = collective_name(c.algorithm);
        r.comm_s += c.total();
        const double ready = b.ready_after_step < 0 ? 0 : after[static_cast<size_t>(b.ready_after_step)];
        net_free = std::max(net_free, ready) + c.total();
        cpu_extra += c.cpu_s;
        serial += c.total();
      }
      const bool overlap = o.mode == "allreduce" && !net.cpu_driven;
      // Overlapped: the network works behind backward, which is slowed by the CPU's share of
      // the collectives; the step waits for the last bucket. CPU-driven links or blocking:
      // every collective runs on the step's critical path.
      const double backward_end = bwd + cpu_extra;
      const double comm_end = overlap ? std::max(backward_end, net_free) : bwd + serial;
      r.step_s = fwd + comm_end + opt;
    }
    r.exposed_s = r.step_s - r.compute_s;
    r.images_per_s = r.step_s > 0 ? static_cast<double>(r.workers * p.batch) / r.step_s : 0;
    if (r.exposed_s > 0.5 * r.step_s) r.bound = "network";
  } else if (o.mode == "ps" || o.mode == "ps-async") {
    const int k = o.servers;
    r.workers = r.ranks - k;
    r.algorithm = "ps";
    if (k < 1 || r.workers < 1)
      return Status::invalid("simulate: " + o.mode + " with " + std::to_string(k) + " server(s) needs more than " +
                             std::to_string(k) + " ranks, got " + std::to_string(r.ranks));
    const double s = static_cast<double>(total), w = r.workers;
    const double reduce_rate = topo.intra.reduce_bps;
    const double lat = net.latency_s * static_cast<double>(std::max<size_t>(p.buckets.size(), 1));
    const double worker_xfer = s / net.bandwidth_bps;                 // push (or pull) of one worker
    const double server_in = w * s / k / net.bandwidth_bps;           // what one server receives per round
    const double server_work = (reduce_rate > 0 ? w * s / k / reduce_rate : 0) + p.optimizer_s / k;
    r.compute_s = fwd + bwd;  // workers run no optimizer: the servers hold it
    if (o.mode == "ps") {
      const double push = lat + std::max(worker_xfer, server_in), pull = push;
      r.comm_s = push + server_work + pull;
      const double push_end = net.cpu_driven ? bwd + push : std::max(bwd, push);
      r.step_s = fwd + push_end + server_work + pull;
      r.images_per_s = w * static_cast<double>(p.batch) / r.step_s;
    } else {
      // Each worker alone: compute, push, pull; the servers serve pushes one at a time.
      const double worker_step = fwd + (net.cpu_driven ? bwd + worker_xfer : std::max(bwd, worker_xfer)) + worker_xfer + 2 * lat;
      // Per push a server receives and returns its shard, adds it and applies the optimizer.
      const double service = 2 * (s / k / net.bandwidth_bps) + (reduce_rate > 0 ? s / k / reduce_rate : 0) + p.optimizer_s / k;
      const double rate = std::min(w / worker_step, 1.0 / service);  // worker steps per second, global
      if (1.0 / service < w / worker_step) r.bound = "server";
      r.comm_s = 2 * worker_xfer + 2 * lat;
      r.step_s = w / rate;
      r.images_per_s = rate * static_cast<double>(p.batch);
    }
    r.exposed_s = r.step_s - r.compute_s;
    if (r.bound == "compute" && r.exposed_s > 0.5 * r.step_s) r.bound = "network";
  } else {
    return Status::invalid("simulate: unknown mode '" + o.mode + "' (allreduce, allreduce-blocking, avg, ps, ps-async)");
  }
  r.comm_share = r.step_s > 0 ? std::max(0.0, r.exposed_s) / r.step_s : 0;
  return r;
}

}  // namespace mosaic::dist
