// Parameter server(s) on dedicated ranks. The last K ranks serve; the others are workers.
// Each parameter is owned by one server (largest first, to the least loaded), which holds
// its optimizer state. Per step every worker sends each server a control message (go on,
// with the learning rate; or stop), pushes each gradient to its owner as soon as backward
// makes it final, then pulls the updated parameters.
//
// Synchronous (`ps`): a server waits for every worker's gradients, averages them (summed
// in worker order), steps its optimizer once and sends the result to every worker: the
// same step as one process on the workers' global batch.
// Asynchronous (`ps-async`): a server applies each worker's gradient as it arrives and sends
// that worker the parameters as they are then. The staleness of an applied gradient is the
// number of updates the server made between the worker's pull and this push. Optionally
// bounded (--max-staleness S): no worker runs more than S steps ahead of the slowest.
//
// Checkpoints: worker 0 asks every server for its shard (gather_state): the parameters as
// the server holds them, its optimizer's state and step count, sent outside the traffic
// counters. Synchronous servers answer between steps, where every worker holds the same
// parameters; asynchronous ones whenever the request arrives. On --resume every rank reads
// the checkpoint, and a server takes its parameters' optimizer state from it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/optimizer.hpp"
#include "core/plan.hpp"
#include "distributed/allreduce_sync.hpp"
#include "distributed/comm.hpp"

namespace mosaic::dist {

/// Which server owns which parameter; world ranks: workers 0..W-1, servers W..W+K-1.
struct PsLayout {
  int workers = 1, servers = 1;
  std::vector<int> owner;           ///< per parameter: server index
  std::vector<int64_t> shard_bytes; ///< per server
  static PsLayout make(const std::vector<ParamRef>& params, int workers, int servers);
  int server_rank(int s) const { return workers + s; }
};

inline constexpr int kStalenessBins = 16;  ///< 0..14, and 15 for 15 or more

class PsWorker : public BackwardListener {
 public:
  PsWorker(Comm& world, std::vector<ParamRef> params, const std::vector<int>& final_step, PsLayout layout);
  /// Before backward: tells every server a step follows, with the learning rate to apply.
  void begin_step(double lr);
  void after_backward_step(int step) override;  ///< pushes the gradients this step made final
  /// After backward: pushes the rest, pulls every parameter from its server.
  void finish_step();
  /// Tells every server this worker is done.
  void stop();
  /// Worker 0 only: every server's parameters into params (their values), and their
  /// optimizer state and step count into `optimizer` (state per parameter, in params order).
  void gather_state(Optimizer& optimizer);
  int64_t expected_sent() const;
  int64_t expected_received() const;
  const SyncTimes& times() const { return times_; }

 private:
  void push(size_t i);
  Comm& comm_;
  std::vector<ParamRef> params_;
  PsLayout layout_;
  std::vector<std::vector<size_t>> ready_after_;
  std::vector<size_t> ready_at_start_;
  std::vector<int> sends_;
  std::vector<bool> pushed_;
  int64_t param_bytes_ = 0;
  SyncTimes times_;
};

class PsServer {
 public:
  /// `params`: every parameter (the server keeps those it owns); `optimizer` updates them.
  /// `max_staleness` >= 0 (ps-async): bounded staleness (stale-synchronous parallel): a
  /// worker gets its reply only while it has pushed at most that many times more than the
  /// slowest running worker, so no worker runs more than max_staleness steps ahead.
  PsServer(Comm& world, const std::vector<ParamRef>& params, PsLayout layout, int index, bool async,
           Optimizer& optimizer, int64_t max_staleness = -1);
  /// Serves until every worker has stopped. Error: workers disagree on stopping (sync).
  Status serve();
  int64_t updates() const { return updates_; }
  int64_t expected_bytes() const { return expected_; }  ///< sent = received
  const std::vector<int64_t>& staleness() const { return staleness_; }
  const SyncTimes& times() const { return times_; }

 private:
  Status serve_sync();
  Status serve_async();
  Status apply(double lr, const std::vector<const float*>& grads);
  void send_state();  // to worker 0: step count, then every owned parameter and its state
  Comm& comm_;
  PsLayout layout_;
  int index_;
  bool async_;
  Optimizer& optimizer_;
  int64_t max_staleness_;
  std::vector<ParamRef> owned_;
  std::vector<size_t> owned_index_;  // position in the full parameter list (message tags)
  std::vector<int64_t> staleness_ = std::vector<int64_t>(kStalenessBins, 0);
  int64_t updates_ = 0, expected_ = 0;
  SyncTimes times_;
};

/// Message tags: control, and per parameter i its gradient (worker to server) and its
/// value (server to worker).
inline constexpr int kControlTag = 7;
inline constexpr int kStateTag = 9;  // checkpoint state, server to worker 0
/// Control codes (first double of a control message).
inline constexpr double kControlStop = 0, kControlStep = 1, kControlState = 2;
inline int grad_tag(size_t i) { return 1000 + 2 * static_cast<int>(i); }
inline int value_tag(size_t i) { return 1001 + 2 * static_cast<int>(i); }

}  // namespace mosaic::dist
