#include "distributed/buckets.hpp"

#include <algorithm>
#include <numeric>

namespace mosaic::dist {

std::vector<BucketPlan> plan_buckets(const std::vector<int64_t>& bytes, const std::vector<int>& final_step,
                                     int64_t bucket_bytes) {
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](size_t i) { return final_step[i] < 0 ? 1 << 30 : final_step[i]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) > key(b); });
  std::vector<BucketPlan> buckets;
  for (size_t i : order) {
    if (buckets.empty() || (!buckets.back().params.empty() && buckets.back().bytes + bytes[i] > bucket_bytes))
      buckets.emplace_back();
    BucketPlan& b = buckets.back();
    b.params.push_back(i);
    b.bytes += bytes[i];
    // Readiness is the last of its parameters to become final (the smallest final step).
    if (final_step[i] >= 0) b.ready_after_step = b.ready_after_step < 0 ? final_step[i] : std::min(b.ready_after_step, final_step[i]);
  }
  return buckets;
}

}  // namespace mosaic::dist
