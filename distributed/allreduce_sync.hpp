// Synchronous data-parallel gradient averaging by ring all-reduce, in buckets.
//
// Parameters are packed into buckets of about `bucket_bytes`, in the order backward
// finishes their gradients. Overlapped (the default, as PyTorch DDP): a bucket's all-reduce
// starts as soon as its last gradient is final, and every later backward step advances the
// rings in flight, so communication runs behind the rest of backward. Blocking
// (--distributed allreduce-blocking): every bucket is reduced after backward ends.
// finish_step() waits for all buckets and leaves every gradient equal to the mean over ranks.
//
// Two collectives sum a bucket. `ring`: ring all-reduce over MPI messages, on the gradient
// tensors themselves (no staging copies), for ranks anywhere. `shm`: when every rank runs on
// one node, the plan computes its gradients into an MPI-3 shared-memory window and each rank
// sums its share of every bucket straight from its peers' copies (shm_allreduce.hpp), with
// a third of the ring's memory traffic. `auto` (the default) takes shm where it can.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/plan.hpp"
#include "distributed/comm.hpp"
#include "distributed/ring_allreduce.hpp"
#include "distributed/shm_allreduce.hpp"

namespace mosaic::dist {

/// Per-step communication timing, summed over steps (seconds).
struct SyncTimes {
  int64_t steps = 0;
  double in_backward_s = 0;  ///< inside the listener during backward: copies, posts, polls
  double exposed_s = 0;      ///< finish_step(): from backward's end until every bucket is reduced
  double span_s = 0;         ///< per step, first bucket start to last bucket done
  /// Of exposed_s, the time spent waiting for peers (shm: spinning on their flags) rather
  /// than moving bytes; 0 for the ring, whose waits and copies cannot be told apart.
  double wait_s = 0;
};

/// The --collective choices, with a line each for help texts and errors.
const std::vector<std::pair<std::string, std::string>>& collectives();
/// An error naming the known ones unless `collective` is one of them.
Status check_collective(const std::string& collective);

class AllreduceSync : public GradientExchange {
 public:
  /// Collective over `comm`. `collective`: ring, shm or auto. With shm the plan's parameter
  /// gradients move into the shared window: take plan.parameters() after this.
  static Expected<std::unique_ptr<AllreduceSync>> create(Comm& comm, Plan& plan, bool overlap, int64_t bucket_bytes,
                                                         const std::string& collective);
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
  /// "ring" or "shm": the collective in use.
  const std::string& collective() const { return collective_; }

 private:
  AllreduceSync(Comm& comm, bool overlap) : comm_(comm), overlap_(overlap) {}
  /// Moves the plan's parameter gradients into the shared window, bucket by bucket.
  Status use_shared_memory(Plan& plan);
  struct Bucket {
    std::vector<size_t> params;
    int64_t floats = 0;
    int pending = 0;
    bool started = false;
    std::unique_ptr<RingAllreduce> ring;
  };
  void start(Bucket& b);
  void poll();
  float scale() const { return 1.f / static_cast<float>(comm_.size()); }

  Comm& comm_;
  std::vector<ParamRef> params_;
  bool overlap_;
  std::string collective_ = "ring";
  std::unique_ptr<ShmAllreduce> shm_;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> ready_after_;  // per plan step: buckets whose count drops
  std::vector<size_t> ready_at_start_;            // buckets holding parameters no step reads
  int64_t gradient_bytes_ = 0;
  int64_t first_start_ns_ = 0;
  SyncTimes times_;
};

}  // namespace mosaic::dist
