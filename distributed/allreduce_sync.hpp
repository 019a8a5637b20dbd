// Synchronous data-parallel gradient averaging by ring all-reduce, in buckets.
//
// Parameters are packed into buckets of about `bucket_bytes`, in the order backward
// finishes their gradients. Overlapped (the default, as PyTorch DDP): a bucket's all-reduce
// starts as soon as its last gradient is final, and every later backward step advances the
// rings in flight, so communication runs behind the rest of backward. Blocking
// (--distributed allreduce-blocking): every bucket is reduced after backward ends.
// finish_step() waits for all buckets and leaves every gradient equal to the mean over ranks.
// The rings work on the gradient tensors themselves (no staging copies), scaling by 1/N as
// each chunk's sum completes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/plan.hpp"
#include "distributed/comm.hpp"
#include "distributed/ring_allreduce.hpp"

namespace mosaic::dist {

/// Per-step communication timing, summed over steps (seconds).
struct SyncTimes {
  int64_t steps = 0;
  double in_backward_s = 0;  ///< inside the listener during backward: copies, posts, polls
  double exposed_s = 0;      ///< finish_step(): from backward's end until every bucket is reduced
  double span_s = 0;         ///< per step, first bucket start to last bucket done
};

class AllreduceSync : public GradientExchange {
 public:
  /// `final_step[i]`: Plan::grad_final_step() for params[i].
  AllreduceSync(Comm& comm, std::vector<ParamRef> params, const std::vector<int>& final_step, bool overlap,
                int64_t bucket_bytes);
  /// Call before each backward pass.
  void begin_step() override;
  void after_backward_step(int step) override;
  /// After backward: reduces what is left, waits, averages; gradients are then the mean.
  void finish_step() override;

  int bucket_count() const { return static_cast<int>(buckets_.size()); }
  std::vector<int64_t> bucket_bytes() const;
  int64_t gradient_bytes() const { return gradient_bytes_; }
  /// Closed form of this rank's sent and received bytes per step for the ring.
  int64_t expected_sent_per_step() const;
  int64_t expected_received_per_step() const;
  const SyncTimes& times() const { return times_; }

 private:
  struct Bucket {
    std::vector<size_t> params;
    int64_t floats = 0;
    int pending = 0;
    bool started = false;
    std::unique_ptr<RingAllreduce> ring;
  };
  void start(Bucket& b);
  void poll();

  Comm& comm_;
  std::vector<ParamRef> params_;
  bool overlap_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> ready_after_;  // per plan step: buckets whose count drops
  std::vector<size_t> ready_at_start_;            // buckets holding parameters no step reads
  int64_t gradient_bytes_ = 0;
  int64_t first_start_ns_ = 0;
  SyncTimes times_;
};

}  // namespace mosaic::dist
