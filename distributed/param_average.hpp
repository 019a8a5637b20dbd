// Model averaging (local SGD): every rank steps its own optimizer on its own gradients, and
// every k steps (and at each epoch's end, before evaluation) the parameters are replaced by
// their mean over ranks, by one ring all-reduce over all parameter tensors in place.
// Optimizer state stays each rank's own, as in local SGD.
#pragma once

#include <cstdint>
#include <vector>

#include "core/plan.hpp"
#include "distributed/allreduce_sync.hpp"
#include "distributed/comm.hpp"
#include "distributed/ring_allreduce.hpp"

namespace mosaic::dist {

class ParamAverager {
 public:
  ParamAverager(Comm& comm, std::vector<ParamRef> params, int64_t every);
  /// After the optimizer step `step` (1-based, counted over the whole run): averages when
  /// step is a multiple of k or `epoch_end`, and returns whether it did.
  bool after_update(int64_t step, bool epoch_end);
  int64_t every() const { return every_; }
  int64_t syncs() const { return syncs_; }
  int64_t parameter_bytes() const { return floats_ * static_cast<int64_t>(sizeof(float)); }
  int64_t expected_sent() const;
  int64_t expected_received() const;
  /// exposed_s and span_s: the averaging time (it blocks); steps: optimizer steps seen.
  const SyncTimes& times() const { return times_; }

 private:
  Comm& comm_;
  std::vector<ParamRef> params_;
  int64_t every_, floats_ = 0, syncs_ = 0, last_ = -1;
  RingAllreduce ring_;
  SyncTimes times_;
};

}  // namespace mosaic::dist
