// Data-parallel training over MPI, as the training loop sees it: start the group and check
// that every rank was given the same settings, give every rank rank 0's parameters, average
// the gradients each step (distributed/allreduce_sync.hpp), sum per-step figures over ranks,
// and report per-rank communication figures.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plan.hpp"
#include "distributed/allreduce_sync.hpp"
#include "distributed/comm.hpp"
#include "distributed/param_average.hpp"

namespace mosaic::dist {

/// The --distributed modes, with a line each for help texts and errors.
const std::vector<std::pair<std::string, std::string>>& distributed_modes();

class DataParallel {
 public:
  /// Starts MPI (a group of one without mpirun) for `mode` and checks that every rank's
  /// `settings` (the command's settings, one string) are the same; an error names the ranks
  /// that differ.
  static Expected<std::unique_ptr<DataParallel>> start(const std::string& mode, double bucket_mb, int64_t sync_every,
                                                       const std::string& settings);
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  const std::string& mode() const { return mode_; }

  /// Checks that every rank built the same parameters (names, shapes), copies rank 0's
  /// values to all ranks, and prepares the gradient buckets.
  Status attach(const Plan& plan);
  /// Around backward: the all-reduce modes average the gradients (begin_step before, the
  /// listener during, finish_step after: gradients are then the means).
  BackwardListener* listener() { return sync_.get(); }
  void begin_step() {
    if (sync_) sync_->begin_step();
  }
  void finish_step() {
    if (sync_) sync_->finish_step();
  }
  /// After the optimizer step `step` (1-based over the run): model averaging averages the
  /// parameters every k steps and at epoch ends.
  void after_update(int64_t step, bool epoch_end) {
    if (averager_) averager_->after_update(step, epoch_end);
  }
  /// Sums over ranks in place (every rank gets the sums).
  void sum(double* values, int count) { comm_->sum(values, count); }
  /// True when every rank's parameters are bitwise equal to rank 0's.
  bool parameters_identical(const std::vector<ParamRef>& params);
  /// Ends the whole job with the message prefixed by this rank (a failing rank must not
  /// leave the others waiting in a collective).
  [[noreturn]] void abort(const std::string& message) const { comm_->abort(message, 2); }

  /// Figures of the run so far: this rank's and, on every rank, all ranks' (one collective).
  /// `seconds`: training time; `images`: images this rank trained on.
  nlohmann::json report(double seconds, int64_t images);

 private:
  Comm* comm_ = nullptr;
  std::string mode_;
  int64_t bucket_bytes_ = 0, sync_every_ = 1;
  std::unique_ptr<AllreduceSync> sync_;
  std::unique_ptr<ParamAverager> averager_;
};

}  // namespace mosaic::dist
