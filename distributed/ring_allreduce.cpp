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

std::vector<RingAllreduce::Piece> RingAllreduce::pieces(int c) const {
  std::vector<Piece> out;
  const int64_t lo = chunk_begin(c), hi = chunk_begin(c + 1);
  for (size_t s = 0; s < segments_.size(); ++s) {
    const int64_t a = std::max(lo, offsets_[s]), b = std::min(hi, offsets_[s] + segments_[s].size);
    if (a < b) out.push_back({segments_[s].data + (a - offsets_[s]), b - a});
  }
  return out;
}

void RingAllreduce::start(std::vector<Segment> segments, float scale) {
  size_ = comm_.size();
  rank_ = comm_.rank();
  segments_ = std::move(segments);
  offsets_.clear();
  n_ = 0;
  for (const auto& s : segments_) offsets_.push_back(n_), n_ += s.size;
  scale_ = scale;
  step_ = 0;
  active_ = size_ > 1 && n_ > 0;
  if (!active_) return;
  incoming_.resize(static_cast<size_t>(n_ / size_ + 1));
  post();
}

void RingAllreduce::post() {
  const int next = mod(rank_ + 1), prev = mod(rank_ - 1);
  const bool reduce = step_ < size_ - 1;
  const int k = reduce ? step_ : step_ - (size_ - 1);
  const int out = reduce ? mod(rank_ - k) : mod(rank_ + 1 - k);
  const int in = reduce ? mod(rank_ - k - 1) : mod(rank_ - k);
  requests_.clear();
  float* staged = incoming_.data();  // reduce-scatter receives beside the data, then adds
  for (const Piece& p : pieces(in)) {
    float* dst = reduce ? staged : p.data;
    requests_.push_back(comm_.irecv(dst, static_cast<size_t>(p.size) * sizeof(float), prev, tag_));
    staged += p.size;
  }
  for (const Piece& p : pieces(out))
    requests_.push_back(comm_.isend(p.data, static_cast<size_t>(p.size) * sizeof(float), next, tag_));
}

bool RingAllreduce::progress() {
  while (active_) {
    for (int& r : requests_)
      if (r >= 0 && comm_.test(r)) r = -1;
    if (std::any_of(requests_.begin(), requests_.end(), [](int r) { return r >= 0; })) return false;
    if (step_ < size_ - 1) {  // add the partial sum that arrived into this rank's chunk
      const int in = mod(rank_ - step_ - 1);
      const bool last = step_ == size_ - 2;  // the chunk is complete: scale it in the same pass
      const float* add = incoming_.data();
      for (const Piece& p : pieces(in)) {
        if (last)
          for (int64_t i = 0; i < p.size; ++i) p.data[i] = (p.data[i] + add[i]) * scale_;
        else
          for (int64_t i = 0; i < p.size; ++i) p.data[i] += add[i];
        add += p.size;
      }
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
    for (int& r : requests_)
      if (r >= 0) comm_.wait(r), r = -1;
    progress();
  }
}

}  // namespace mosaic::dist
