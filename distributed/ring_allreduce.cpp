#include "distributed/ring_allreduce.hpp"

#include <algorithm>

namespace mosaic::dist {

int64_t RingAllreduce::chunk_begin(int c) const {
  // Chunks of n/N floats, the first n mod N one float longer.
  const int64_t base = n_ / size_, extra = n_ % size_;
  return c * base + std::min<int64_t>(c, extra);
}

int64_t RingAllreduce::expected_bytes(int64_t n, int ranks, int rank) {
  if (ranks < 2) return 0;
  const int64_t base = n / ranks, extra = n % ranks;
  auto size = [&](int c) { return base + (c < extra ? 1 : 0); };
  auto m = [&](int v) { return ((v % ranks) + ranks) % ranks; };
  int64_t floats = 0;
  for (int k = 0; k < ranks - 1; ++k) floats += size(m(rank - k));      // reduce-scatter sends
  for (int k = 0; k < ranks - 1; ++k) floats += size(m(rank + 1 - k));  // all-gather sends
  return floats * static_cast<int64_t>(sizeof(float));
}

void RingAllreduce::start(float* data, int64_t n) {
  size_ = comm_.size();
  rank_ = comm_.rank();
  data_ = data;
  n_ = n;
  step_ = 0;
  active_ = size_ > 1 && n > 0;
  if (!active_) return;
  incoming_.resize(static_cast<std::size_t>(n / size_ + 1));
  post();
}

void RingAllreduce::post() {
  const int next = mod(rank_ + 1), prev = mod(rank_ - 1);
  const bool reduce = step_ < size_ - 1;
  const int k = reduce ? step_ : step_ - (size_ - 1);
  const int out = reduce ? mod(rank_ - k) : mod(rank_ + 1 - k);
  const int in = reduce ? mod(rank_ - k - 1) : mod(rank_ - k);
  float* dst = reduce ? incoming_.data() : data_ + chunk_begin(in);
  recv_ = comm_.irecv(dst, static_cast<std::size_t>(chunk_size(in)) * sizeof(float), prev, tag_);
  send_ = comm_.isend(data_ + chunk_begin(out), static_cast<std::size_t>(chunk_size(out)) * sizeof(float), next, tag_);
}

bool RingAllreduce::progress() {
  while (active_) {
    if (send_ >= 0 && comm_.test(send_)) send_ = -1;
    if (recv_ >= 0 && comm_.test(recv_)) recv_ = -1;
    if (send_ >= 0 || recv_ >= 0) return false;
    if (step_ < size_ - 1) {  // add the received partial sum into this rank's chunk
      const int in = mod(rank_ - step_ - 1);
      float* mine = data_ + chunk_begin(in);
      const int64_t len = chunk_size(in);
      for (int64_t i = 0; i < len; ++i) mine[i] += incoming_[static_cast<std::size_t>(i)];
    }
    if (++step_ == 2 * (size_ - 1)) {
      active_ = false;
      break;
    }
    post();
  }
  return true;
}

void RingAllreduce::finish() {
  while (active_) {
    if (send_ >= 0) comm_.wait(send_), send_ = -1;
    if (recv_ >= 0) comm_.wait(recv_), recv_ = -1;
    progress();
  }
}

}  // namespace mosaic::dist
