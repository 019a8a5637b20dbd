// The cost model behind `mosaic simulate`: predicted time of one data-parallel training
// step from a measured compute profile (per-node forward and backward times), the bucket
// schedule of the real all-reduce, and a network profile, for any number of ranks and
// nodes. The formulas are the standard alpha-beta(-gamma) collective models; they are
// stated, with their assumptions, in docs/distributed.md ("Simulating beyond this machine").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic::dist {

/// A link: a message of m bytes takes latency + m / bandwidth. `cpu_driven`: the rank's own
/// CPU moves the bytes (shared memory without a copy engine), so transfers cannot hide
/// behind its compute. reduce_bps: the rate at which a rank adds received bytes into its
/// own (the gamma term).
struct NetworkProfile {
  std::string name;
  double latency_s = 0;
  double bandwidth_bps = 0;  ///< bytes per second, one direction
  bool cpu_driven = false;
  double reduce_bps = 0;     ///< bytes per second
  std::string source;        ///< "preset: ...", or the file and how it was measured
  /// A measured CPU-driven profile already holds the time-sharing of the run it was measured
  /// in (ranks per core on that host, >= 1): CPU-driven costs scale by the topology's
  /// oversubscription relative to this one.
  double measured_oversubscription = 1;
  /// One node: bytes of a bucket per second that Mosaic's shared-memory all-reduce takes (a
  /// rank reads its share from every copy and writes the sum into every copy: about twice
  /// the bucket in memory traffic per rank, whatever the rank count). 0: not available.
  double shm_bps = 0;
};

/// Names of the built-in profiles, in the order docs/distributed.md lists them.
std::vector<std::string> network_presets();
/// A built-in profile, or an error naming the known ones.
Expected<NetworkProfile> network_preset(const std::string& name);
/// A preset name, or a JSON file written by `mosaic simulate --measure-network`.
Expected<NetworkProfile> load_network(const std::string& name_or_file);
Status save_network(const NetworkProfile& p, const std::string& file, const std::string& extra_json = "");

/// Where the ranks run: `nodes` machines with `ranks_per_node` ranks each. Ranks on one
/// node talk over `intra`, across nodes over `inter`. cores_per_node (0: unlimited) with
/// threads_per_rank: a node with more rank threads than cores slows every rank's compute
/// (and its CPU-driven transfers) by the ratio.
struct Topology {
  int nodes = 1;
  int ranks_per_node = 1;
  int cores_per_node = 0;
  int threads_per_rank = 1;
  NetworkProfile intra, inter;
  int ranks() const { return nodes * ranks_per_node; }
  /// >= 1: how much slower each rank's CPU work runs than alone.
  double oversubscription() const;
};

/// kShm: Mosaic's shared-memory all-reduce (one node only). kMosaic: what Mosaic's
/// `--collective auto` runs: kShm on one node when the profile has a shm rate, else kRing.
/// kAuto: the cheapest of them all, as tuned MPI libraries choose.
enum class Collective { kRing, kRecursiveDoubling, kHalvingDoubling, kShm, kMosaic, kAuto };
Expected<Collective> parse_collective(const std::string& s);
std::string collective_name(Collective c);

/// The parts of one collective's time on one rank (seconds).
struct CommCost {
  double latency_s = 0, transfer_s = 0, reduce_s = 0;
  double total() const { return latency_s + transfer_s + reduce_s; }
  /// What the rank's CPU spends: the reduction, and the transfers when the link is CPU-driven.
  double cpu_s = 0;
  Collective algorithm = Collective::kRing;
};

/// All-reduce of `bytes` over the topology's ranks (ranks are placed node by node).
/// kShm on several nodes, or without a shm rate, costs infinity (check shm_available()).
CommCost allreduce_cost(int64_t bytes, const Topology& topo, Collective algorithm);
bool shm_available(const Topology& topo);

/// The measured single-rank step: forward, loss, backward of each plan step (indexed by
/// step; 0 for views), optimizer; and the gradient buckets (bytes, ready after which step).
struct StepProfile {
  std::string model, backend;
  int64_t batch = 0;
  double forward_s = 0, loss_s = 0, optimizer_s = 0;
  std::vector<double> backward_step_s;
  struct Bucket {
    int64_t bytes = 0;
    int ready_after_step = -1;
  };
  std::vector<Bucket> buckets;
  /// The profile was measured with this many rank threads per core running at once (>= 1,
  /// `simulate --profile-concurrency`): compute scales by the topology's oversubscription
  /// relative to it, as CPU-driven transfers do with NetworkProfile's.
  double measured_oversubscription = 1;
  int64_t gradient_bytes() const;
  double backward_s() const;
  double compute_s() const { return forward_s + loss_s + backward_s() + optimizer_s; }
  /// Multiplies forward, loss and backward times by `f`, and the optimizer's too when
  /// `optimizer` (a faster device scales everything; a larger batch all but the update).
  void scale_compute(double f, bool optimizer);
};

struct SimOptions {
  std::string mode = "allreduce";  ///< allreduce, allreduce-blocking, avg, ps, ps-async
  Collective algorithm = Collective::kAuto;
  int servers = 1;      ///< ps modes: dedicated server ranks among the topology's ranks
  int sync_every = 1;   ///< avg
};

struct Prediction {
  int ranks = 1, workers = 1;
  double step_s = 0;         ///< one synchronous step (async: a worker's mean step)
  double compute_s = 0;      ///< per worker, with oversubscription
  double comm_s = 0;         ///< communication time per step (all collectives, serial)
  double exposed_s = 0;      ///< the part of comm_s not hidden behind backward
  double images_per_s = 0;   ///< global
  double speedup = 0, efficiency = 0;  ///< against one rank alone (filled by simulate_scaling)
  double comm_share = 0;     ///< exposed_s / step_s
  std::string algorithm;     ///< the collective used (or "ps")
  std::string bound;         ///< "compute", "network", or "server" (ps-async)
};

/// Predicts one configuration. Errors name what does not fit (e.g. ps with no worker left).
Expected<Prediction> simulate_step(const StepProfile& p, const Topology& topo, const SimOptions& o);

}  // namespace mosaic::dist
