// Data-parallel training over MPI, as the training loop sees it: start the group and check
// that every rank was given the same settings, give every rank rank 0's parameters, exchange
// gradients or parameters each step in the chosen mode, sum per-step figures over the
// workers, and report per-rank communication figures.
//
// Roles: in the all-reduce and averaging modes every rank is a worker. In the parameter-
// server modes the last --servers ranks serve (distributed/param_server.hpp) and the others
// are workers; rank() and size() count workers only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/optimizer.hpp"
#include "core/plan.hpp"
#include "distributed/allreduce_sync.hpp"
#include "distributed/comm.hpp"
#include "distributed/param_average.hpp"
#include "distributed/param_server.hpp"

namespace mosaic::dist {

/// The --distributed modes, with a line each for help texts and errors.
const std::vector<std::pair<std::string, std::string>>& distributed_modes();

struct DataParallelOptions {
  std::string mode;
  double bucket_mb = 25;   ///< allreduce modes
  std::string collective = "auto";  ///< allreduce modes: ring, shm or auto (collectives())
  int64_t sync_every = 1;  ///< avg
  int servers = 1;         ///< ps, ps-async
  int64_t max_staleness = -1;  ///< ps-async: bounded staleness (-1: unbounded)
};

class DataParallel {
 public:
  /// Starts MPI (a group of one without mpirun) and checks that every rank's `settings`
  /// (the command's settings, one string) are the same; an error names the ranks that differ.
  static Expected<std::unique_ptr<DataParallel>> start(const DataParallelOptions& options, const std::string& settings);
  /// This worker's index among the workers, and how many there are.
  int rank() const { return workers_->rank(); }
  int size() const { return workers_->size(); }
  int world_rank() const { return world_->rank(); }
  int servers() const { return servers_; }
  bool is_server() const { return world_->rank() >= world_->size() - servers_; }
  const std::string& mode() const { return options_.mode; }
  /// Workers apply the optimizer themselves (false: the servers do).
  bool workers_update() const { return servers_ == 0; }
  /// Per-step losses are the global batch's (summed over workers); not in ps-async, whose
  /// workers do not wait for each other.
  bool global_losses() const { return options_.mode != "ps-async"; }

  /// Checks that every rank built the same parameters (names, shapes), copies rank 0's
  /// values to all ranks, and prepares this rank's part of the exchange (the all-reduce over
  /// shared memory moves the plan's parameter gradients into a shared window: take
  /// plan.parameters() after this).
  Status attach(Plan& plan);
  /// Drops every reference to the attached plan's tensors (call before the plan goes away:
  /// its buffers report their release to the plan's memory tracker).
  void detach();
  /// Server ranks: serve the workers until they stop (`optimizer` updates this server's shard).
  Status serve(Optimizer& optimizer);

  /// Around backward (workers): begin_step before (with the learning rate in force), the
  /// listener during, finish_step after. All-reduce: gradients are then the means. Parameter
  /// server: gradients pushed, updated parameters pulled.
  BackwardListener* listener();
  /// The all-reduce modes' exchange, for loops that drive it themselves (bench); else null.
  GradientExchange* gradient_exchange() { return sync_.get(); }
  void begin_step(double lr);
  void finish_step();
  /// After the optimizer step `step` (1-based over the run): model averaging averages the
  /// parameters every k steps and at epoch ends.
  void after_update(int64_t step, bool epoch_end) {
    if (averager_) averager_->after_update(step, epoch_end);
  }
  /// Workers, at the end of training: lets the servers finish.
  void stop() {
    if (ps_worker_) ps_worker_->stop();
  }
  /// Before a checkpoint, on world rank 0 in the parameter-server modes: the servers'
  /// parameters into the attached plan and their optimizer state into `optimizer` (which the
  /// workers never step). Does nothing elsewhere.
  void gather_server_state(Optimizer& optimizer) {
    if (ps_worker_ && world_->rank() == 0) ps_worker_->gather_state(optimizer);
  }
  /// Sums over the workers in place (every worker gets the sums).
  void sum(double* values, int count) { workers_->sum(values, count); }
  /// Whether `flag` is set on any worker (one sum over the workers): every worker gets the same
  /// answer at the same step, so that they stop together (a SIGTERM from mpirun reaches the
  /// ranks at slightly different moments).
  bool on_any_worker(bool flag) {
    double v = flag ? 1.0 : 0.0;
    workers_->sum(&v, 1);
    return v > 0;
  }
  /// Workers: true when every worker's parameters are bitwise equal to worker 0's.
  bool parameters_identical(const std::vector<ParamRef>& params);
  /// Ends the whole job with the message prefixed by this rank (a failing rank must not
  /// leave the others waiting in a collective).
  [[noreturn]] void abort(const std::string& message) const { world_->abort(message, 2); }

  /// Figures of the run, per rank and aggregated (one collective over every rank, servers
  /// included). `seconds`: training time; `images`: images this rank trained on.
  nlohmann::json report(double seconds, int64_t images);

 private:
  Comm* world_ = nullptr;
  std::unique_ptr<Comm> split_;  // the workers' group in the parameter-server modes
  Comm* workers_ = nullptr;
  DataParallelOptions options_;
  int servers_ = 0;
  int64_t bucket_bytes_ = 0;
  std::unique_ptr<AllreduceSync> sync_;
  std::unique_ptr<ParamAverager> averager_;
  std::unique_ptr<PsWorker> ps_worker_;
  std::unique_ptr<PsServer> ps_server_;
  std::vector<ParamRef> params_;
  PsLayout layout_;
  Traffic base_;  // the traffic before attach(): report() counts from there
};

/// Ends MPI (if it was started) when the command's scope ends, on every path out.
struct MpiSession {
  MpiSession() = default;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  ~MpiSession() { Comm::finalize(); }
};

/// Detaches the group (if any) from its plan when the scope ends: declare it after the plan,
/// so the group lets go of the plan's tensors before the plan is destroyed.
struct DetachOnExit {
  DataParallel* dp;
  DetachOnExit(const DetachOnExit&) = delete;
  DetachOnExit& operator=(const DetachOnExit&) = delete;
  ~DetachOnExit() {
    if (dp) dp->detach();
  }
};

}  // namespace mosaic::dist
