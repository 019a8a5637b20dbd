#include "distributed/allreduce_sync.hpp"

#include <algorithm>
#include <numeric>

#include "distributed/buckets.hpp"

namespace mosaic::dist {
namespace {
int64_t floats_of(const Tensor& t) { return static_cast<int64_t>(t.bytes() / sizeof(float)); }
}  // namespace

AllreduceSync::AllreduceSync(Comm& comm, std::vector<ParamRef> params, const std::vector<int>& final_step,
                             bool overlap, int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)), overlap_(overlap) {
  std::vector<int64_t> bytes;
  for (const auto& p : params_) bytes.push_back(static_cast<int64_t>(p.grad.bytes()));
  int max_step = -1;
  for (int s : final_step) max_step = std::max(max_step, s);
  ready_after_.resize(static_cast<size_t>(max_step + 1));
  for (const BucketPlan& plan : plan_buckets(bytes, final_step, bucket_bytes)) {
    const size_t bi = buckets_.size();
    Bucket& b = buckets_.emplace_back();
    b.params = plan.params;
    for (size_t i : plan.params) {
      b.floats += floats_of(params_[i].grad);
      gradient_bytes_ += bytes[i];
      if (final_step[i] < 0) ready_at_start_.push_back(bi);
      else ready_after_[static_cast<size_t>(final_step[i])].push_back(bi);
    }
  }
  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    buckets_[bi].ring = std::make_unique<RingAllreduce>(comm_, static_cast<int>(bi) + 100);
}

std::vector<int64_t> AllreduceSync::bucket_bytes() const {
  std::vector<int64_t> out;
  for (const auto& b : buckets_) out.push_back(b.floats * static_cast<int64_t>(sizeof(float)));
  return out;
}

int64_t AllreduceSync::expected_sent_per_step() const {
  int64_t total = 0;
  for (const auto& b : buckets_)
    total += RingAllreduce::expected_bytes(b.floats, comm_.size(), comm_.rank());
  return total;
}

int64_t AllreduceSync::expected_received_per_step() const {
  const int from = (comm_.rank() + comm_.size() - 1) % comm_.size();
  int64_t total = 0;
  for (const auto& b : buckets_)
    total += RingAllreduce::expected_bytes(b.floats, comm_.size(), from);
  return total;
}

void AllreduceSync::begin_step() {
  first_start_ns_ = 0;
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.started = false;
  }
  const int64_t t0 = now_ns();
  for (size_t bi : ready_at_start_)
    if (--buckets_[bi].pending == 0 && overlap_) start(buckets_[bi]);
  times_.in_backward_s += static_cast<double>(now_ns() - t0) / 1e9;
}

void AllreduceSync::start(Bucket& b) {
  if (!first_start_ns_) first_start_ns_ = now_ns();
  std::vector<Segment> segments;
  for (size_t i : b.params) segments.push_back({params_[i].grad.f32(), floats_of(params_[i].grad)});
  b.started = true;
  b.ring->start(std::move(segments), 1.f / static_cast<float>(comm_.size()));
}

void AllreduceSync::poll() {
  for (auto& b : buckets_)
    if (b.started && b.ring->active()) b.ring->progress();
}

void AllreduceSync::after_backward_step(int step) {
  if (!overlap_ || comm_.size() < 2) return;
  const int64_t t0 = now_ns();
  if (step >= 0 && static_cast<size_t>(step) < ready_after_.size())
    for (size_t bi : ready_after_[static_cast<size_t>(step)])
      if (--buckets_[bi].pending == 0) start(buckets_[bi]);
  poll();
  times_.in_backward_s += static_cast<double>(now_ns() - t0) / 1e9;
}

void AllreduceSync::finish_step() {
  ++times_.steps;
  if (comm_.size() < 2) return;
  const int64_t t0 = now_ns();
  for (auto& b : buckets_)
    if (!b.started) start(b);
  // Advance every ring in turn (each waits on its own messages; polling all keeps every
  // bucket's next step posted as soon as it can be).
  for (bool busy = true; busy;) {
    busy = false;
    for (auto& b : buckets_) busy = !b.ring->progress() || busy;
  }
  // The gradients are now the means over ranks.
  const int64_t t1 = now_ns();
  times_.exposed_s += static_cast<double>(t1 - t0) / 1e9;
  times_.span_s += static_cast<double>(t1 - (first_start_ns_ ? std::min(first_start_ns_, t0) : t0)) / 1e9;
}

}  // namespace mosaic::dist
