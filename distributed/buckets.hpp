// How gradients are packed into all-reduce buckets, in one place: the synchronous
// all-reduce (allreduce_sync) runs this plan and `mosaic simulate` predicts from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mosaic::dist {

struct BucketPlan {
  std::vector<std::size_t> params;  ///< indices into the parameter list, in the order they become final
  int64_t bytes = 0;
  /// The plan step whose backward makes the bucket's last gradient final (backward runs from
  /// the last step to the first, so the smallest final step of its parameters); -1 when no
  /// step reads any of them (ready before backward starts).
  int ready_after_step = -1;
};

/// Packs parameters into buckets of about `bucket_bytes`, in the order backward finishes
/// their gradients (`final_step[i]`: Plan::grad_final_step() for parameter i, -1 if no step
/// reads it; those come first). A parameter larger than a bucket gets a bucket of its own.
std::vector<BucketPlan> plan_buckets(const std::vector<int64_t>& bytes, const std::vector<int>& final_step,
                                     int64_t bucket_bytes);

}  // namespace mosaic::dist
