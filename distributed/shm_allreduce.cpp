#include "distributed/shm_allreduce.hpp"

#include <algorithm>

#include "core/events.hpp"

namespace mosaic::dist {
namespace {

constexpr int64_t kLine = 64;  // one flag per cache line: ranks spin on them

// Chunk c of n floats over `ranks`: cut near c·n/ranks, on 16-float (cache-line) boundaries
// so that no two ranks write one line.
int64_t chunk_begin(int64_t n, int ranks, int c) {
  if (c >= ranks) return n;
  return std::min(n, (n * c / ranks) / 16 * 16);
}

int64_t load(const int64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void store(int64_t* p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

}  // namespace

int64_t ShmAllreduce::expected_bytes(int64_t n, int ranks, int rank) {
  if (ranks < 2) return 0;
  const int64_t mine = chunk_begin(n, ranks, rank + 1) - chunk_begin(n, ranks, rank);
  return (ranks - 1) * mine * static_cast<int64_t>(sizeof(float));
}

Expected<std::unique_ptr<ShmAllreduce>> ShmAllreduce::create(Comm& comm, const std::vector<int64_t>& bucket_floats) {
  auto s = std::unique_ptr<ShmAllreduce>(new ShmAllreduce(comm));
  s->floats_ = bucket_floats;
  int64_t at = 0;
  for (int64_t n : bucket_floats) {
    s->offset_.push_back(at);
    at += line_padded(n);  // every bucket starts on a cache line
  }
  s->data_offset_ = static_cast<int64_t>(bucket_floats.size()) * 2 * kLine;
  auto w = comm.allocate_shared(static_cast<size_t>(s->data_offset_ + at * static_cast<int64_t>(sizeof(float))));
  if (!w.ok()) return w.status();
  s->window_ = std::move(w).value();
  s->reduced_.assign(bucket_floats.size(), 0);
  s->complete_.assign(bucket_floats.size(), 0);
  return s;
}

float* ShmAllreduce::bucket(size_t b) const {
  return reinterpret_cast<float*>(window_->base(comm_.rank()) + data_offset_) + offset_[b];
}

int64_t* ShmAllreduce::flag(int rank, size_t b, int which) const {
  return reinterpret_cast<int64_t*>(window_->base(rank) + (static_cast<int64_t>(b) * 2 + which) * kLine);
}

void ShmAllreduce::begin_step() {
  ++step_;
  std::fill(reduced_.begin(), reduced_.end(), 0);
  std::fill(complete_.begin(), complete_.end(), 0);
}

void ShmAllreduce::ready(size_t b) { store(flag(comm_.rank(), b, 0), step_); }

void ShmAllreduce::reduce(size_t b, float scale) {
  const int n = comm_.size(), me = comm_.rank();
  const int64_t lo = chunk_begin(floats_[b], n, me), hi = chunk_begin(floats_[b], n, me + 1);
  std::vector<float*> copy(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    copy[static_cast<size_t>(r)] = reinterpret_cast<float*>(window_->base(r) + data_offset_) + offset_[b];
  if (n == 2) {
    float* __restrict a = copy[0];
    float* __restrict c = copy[1];
    for (int64_t i = lo; i < hi; ++i) {
      const float sum = (a[i] + c[i]) * scale;
      a[i] = sum;
      c[i] = sum;
    }
  } else {
    constexpr int64_t kBlock = 1024;  // sums of a block stay in L1 between the passes
    float acc[kBlock];
    for (int64_t i0 = lo; i0 < hi; i0 += kBlock) {
      const int64_t m = std::min(kBlock, hi - i0);
      const float* first = copy[0] + i0;
      for (int64_t j = 0; j < m; ++j) acc[j] = first[j];
      for (int r = 1; r < n; ++r) {
        const float* src = copy[static_cast<size_t>(r)] + i0;
        for (int64_t j = 0; j < m; ++j) acc[j] += src[j];
      }
      for (int64_t j = 0; j < m; ++j) acc[j] *= scale;
      for (int r = 0; r < n; ++r) {
        float* dst = copy[static_cast<size_t>(r)] + i0;
        for (int64_t j = 0; j < m; ++j) dst[j] = acc[j];
      }
    }
  }
  const int64_t moved = expected_bytes(floats_[b], n, me);
  comm_.count(moved, moved);
}

bool ShmAllreduce::progress(float scale) {
  const int n = comm_.size();
  bool all = true;
  for (size_t b = 0; b < floats_.size(); ++b) {
    if (complete_[b]) continue;
    if (!reduced_[b]) {
      bool ready_everywhere = true;
      for (int r = 0; r < n && ready_everywhere; ++r) ready_everywhere = load(flag(r, b, 0)) >= step_;
      if (!ready_everywhere) {
        all = false;
        continue;
      }
      const int64_t t0 = now_ns();
      reduce(b, scale);
      work_s_ += static_cast<double>(now_ns() - t0) / 1e9;
      store(flag(comm_.rank(), b, 1), step_);
      reduced_[b] = 1;
    }
    bool done_everywhere = true;
    for (int r = 0; r < n && done_everywhere; ++r) done_everywhere = load(flag(r, b, 1)) >= step_;
    if (done_everywhere) complete_[b] = 1;
    else all = false;
  }
  return all;
}

}  // namespace mosaic::dist
