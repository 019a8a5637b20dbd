// Ring all-reduce (reduce-scatter, then all-gather) of one float buffer over MPI
// point-to-point messages, advanced without blocking: start(), then progress() whenever the
// caller has a moment (between backward nodes), or finish() to block until done. Several
// buffers may be in flight at once (one tag each).
//
// N ranks, buffer of n floats cut into N chunks. In reduce-scatter step k (k = 0..N-2)
// rank r sends chunk (r - k) mod N to rank r+1 and adds what rank r-1 sends (its chunk
// (r - k - 1) mod N) into its own; afterwards rank r holds the full sum of chunk (r + 1) mod N.
// All-gather step k passes chunk (r + 1 - k) mod N on and overwrites chunk (r - k) mod N with
// what arrives. Each rank sends and receives about 2 (N-1)/N n floats (expected_bytes() gives
// the exact count: chunks differ by one float when N does not divide n). Every chunk is
// summed once, in ring order, and then copied: all ranks end with bitwise identical sums.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/comm.hpp"

namespace mosaic::dist {

class RingAllreduce {
 public:
  RingAllreduce(Comm& comm, int tag) : comm_(comm), tag_(tag) {}
  /// Starts summing data[0..n) over all ranks in place. The buffer must stay valid until done.
  void start(float* data, int64_t n);
  /// Advances without blocking; true when the sum is complete (or nothing was started).
  bool progress();
  /// Blocks until complete.
  void finish();
  bool active() const { return active_; }
  /// Bytes rank `rank` sends for a buffer of n floats over `ranks` ranks; it receives what
  /// rank - 1 sends.
  static int64_t expected_bytes(int64_t n, int ranks, int rank);

 private:
  void post();
  int64_t chunk_begin(int c) const;
  int64_t chunk_size(int c) const { return chunk_begin(c + 1) - chunk_begin(c); }
  int mod(int v) const { return ((v % size_) + size_) % size_; }

  Comm& comm_;
  int tag_;
  int size_ = 1, rank_ = 0;
  float* data_ = nullptr;
  int64_t n_ = 0;
  int step_ = 0;  // 0..N-2 reduce-scatter, N-1..2N-3 all-gather
  int send_ = -1, recv_ = -1;
  bool active_ = false;
  std::vector<float> incoming_;
};

}  // namespace mosaic::dist
