#include "distributed/allreduce_sync.hpp"

#include <algorithm>
#include <numeric>
#include <thread>

#include "distributed/buckets.hpp"

namespace mosaic::dist {
namespace {
int64_t floats_of(const Tensor& t) { return static_cast<int64_t>(t.bytes() / sizeof(float)); }
}  // namespace

const std::vector<std::pair<std::string, std::string>>& collectives() {
  static const std::vector<std::pair<std::string, std::string>> list = {
      {"auto", "shm when every rank runs on one node, else ring"},
      {"ring", "ring all-reduce over MPI point-to-point messages (ranks anywhere)"},
      {"shm", "each rank sums its share of every bucket in an MPI-3 shared-memory window (one node)"},
  };
  return list;
}

Status check_collective(const std::string& collective) {
  const auto& known = collectives();
  if (std::any_of(known.begin(), known.end(), [&](const auto& c) { return c.first == collective; })) return Status::ok();
  std::string names;
  for (const auto& c : known) names += (names.empty() ? "" : ", ") + c.first;
  return Status::invalid("unknown --collective '" + collective + "' (known: " + names + ")");
}

Expected<std::unique_ptr<AllreduceSync>> AllreduceSync::create(Comm& comm, Plan& plan, bool overlap,
                                                               int64_t bucket_bytes, const std::string& collective) {
  MOSAIC_RETURN_IF_ERROR(check_collective(collective));
  auto sync = std::unique_ptr<AllreduceSync>(new AllreduceSync(comm, overlap));
  sync->params_ = plan.parameters();
  const std::vector<int> final_step = plan.grad_final_step();
  std::vector<int64_t> bytes;
  for (const auto& p : sync->params_) bytes.push_back(static_cast<int64_t>(p.grad.bytes()));
  int max_step = -1;
  for (int s : final_step) max_step = std::max(max_step, s);
  sync->ready_after_.resize(static_cast<size_t>(max_step + 1));
  for (const BucketPlan& bp : plan_buckets(bytes, final_step, bucket_bytes)) {
    const size_t bi = sync->buckets_.size();
    Bucket& b = sync->buckets_.emplace_back();
    b.params = bp.params;
    for (size_t i : bp.params) {
      b.floats += floats_of(sync->params_[i].grad);
      sync->gradient_bytes_ += bytes[i];
      if (final_step[i] < 0) sync->ready_at_start_.push_back(bi);
      else sync->ready_after_[static_cast<size_t>(final_step[i])].push_back(bi);
    }
  }
  if (comm.size() > 1 && collective != "ring") {
    const bool one_node = comm.one_node();
    if (!one_node && collective == "shm")
      return Status::invalid("--collective shm needs every rank on one node (this job spans several; use ring or auto)");
    if (one_node) MOSAIC_RETURN_IF_ERROR(sync->use_shared_memory(plan));
  }
  if (!sync->shm_)
    for (size_t bi = 0; bi < sync->buckets_.size(); ++bi)
      sync->buckets_[bi].ring = std::make_unique<RingAllreduce>(comm, static_cast<int>(bi) + 100);
  return sync;
}

Status AllreduceSync::use_shared_memory(Plan& plan) {
  // Each bucket's gradients one after another, every tensor on a cache line.
  const auto padded = ShmAllreduce::line_padded;
  std::vector<int64_t> floats;
  for (const auto& b : buckets_) {
    int64_t n = 0;
    for (size_t i : b.params) n += padded(floats_of(params_[i].grad));
    floats.push_back(n);
  }
  MOSAIC_ASSIGN_OR_RETURN(shm_, ShmAllreduce::create(comm_, floats));
  std::vector<Tensor> grads(params_.size());
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    float* at = shm_->bucket(bi);
    for (size_t i : buckets_[bi].params) {
      const Tensor& g = params_[i].grad;
      grads[i] = Tensor::on_buffer(g.desc(), std::make_shared<Buffer>(at, g.bytes(), shm_->keeper(), &plan.tracker()));
      at += padded(floats_of(g));
    }
  }
  MOSAIC_RETURN_IF_ERROR(plan.bind_parameter_grads(grads));
  params_ = plan.parameters();
  collective_ = "shm";
  return Status::ok();
}

std::vector<int64_t> AllreduceSync::bucket_bytes() const {
  std::vector<int64_t> out;
  for (const auto& b : buckets_) out.push_back(b.floats * static_cast<int64_t>(sizeof(float)));
  return out;
}

int64_t AllreduceSync::expected_sent_per_step() const {
  int64_t total = 0;
  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    total += shm_ ? ShmAllreduce::expected_bytes(shm_->floats(bi), comm_.size(), comm_.rank())
                  : RingAllreduce::expected_bytes(buckets_[bi].floats, comm_.size(), comm_.rank());
  return total;
}

int64_t AllreduceSync::expected_received_per_step() const {
  if (shm_) return expected_sent_per_step();  // it reads from its peers what it writes into them
  const int from = (comm_.rank() + comm_.size() - 1) % comm_.size();
  int64_t total = 0;
  for (const auto& b : buckets_)
    total += RingAllreduce::expected_bytes(b.floats, comm_.size(), from);
  return total;
}

void AllreduceSync::begin_step() {
  first_start_ns_ = 0;
  if (shm_) shm_->begin_step();
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
  b.started = true;
  if (shm_) {
    shm_->ready(static_cast<size_t>(&b - buckets_.data()));
    return;
  }
  std::vector<Segment> segments;
  for (size_t i : b.params) segments.push_back({params_[i].grad.f32(), floats_of(params_[i].grad)});
  b.ring->start(std::move(segments), scale());
}

void AllreduceSync::poll() {
  if (shm_) {
    shm_->progress(scale());
    return;
  }
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
  if (shm_) {
    const double work0 = shm_->work_s();
    while (!shm_->progress(scale())) std::this_thread::yield();  // peers may share this core
    times_.wait_s += static_cast<double>(now_ns() - t0) / 1e9 - (shm_->work_s() - work0);
  }
  // Advance every ring in turn (each waits on its own messages; polling all keeps every
  // bucket's next step posted as soon as it can be).
  for (bool busy = !shm_; busy;) {
    busy = false;
    for (auto& b : buckets_) busy = !b.ring->progress() || busy;
  }
  // The gradients are now the means over ranks.
  const int64_t t1 = now_ns();
  times_.exposed_s += static_cast<double>(t1 - t0) / 1e9;
  times_.span_s += static_cast<double>(t1 - (first_start_ns_ ? std::min(first_start_ns_, t0) : t0)) / 1e9;
}

}  // namespace mosaic::dist
