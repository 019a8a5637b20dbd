// Ring all-reduce (reduce-scatter, then all-gather) over MPI point-to-point messages,
// advanced without blocking: start(), then progress() whenever the caller has a moment
// (between backward nodes), or finish() to block until done. Several rings may be in
// flight at once (one tag each).
//
// The data is a list of float segments (the gradients of a bucket's parameters, where
// they live: nothing is copied into a staging buffer), seen as one vector of n floats cut
// into N chunks. In reduce-scatter step k (k = 0..N-2) rank r sends chunk (r - k) mod N to
// rank r+1 and adds what rank r-1 sends (its chunk (r - k - 1) mod N) into its own; after
// the last step rank r holds the full sum of chunk (r + 1) mod N, scaled by `scale` in the
// same pass. All-gather step k passes chunk (r + 1 - k) mod N on and overwrites chunk
// (r - k) mod N with what arrives. Each rank sends and receives about 2 (N-1)/N n floats
// (expected_bytes() gives the exact count: chunks differ by one float when N does not divide
// n). Every chunk is summed once, in ring order, then copied: all ranks end with bitwise
// identical results. A chunk that spans several segments travels as one message per piece;
// all ranks cut the same way, so pieces match.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/comm.hpp"

namespace mosaic::dist {

struct Segment {
  float* data = nullptr;
  int64_t size = 0;
};

class RingAllreduce {
 public:
  RingAllreduce(Comm& comm, int tag) : comm_(comm), tag_(tag) {}
  /// Starts summing the segments over all ranks in place, then multiplying by `scale`.
  /// The segments must stay valid until done.
  void start(std::vector<Segment> segments, float scale);
  /// Advances without blocking; true when complete (or nothing was started).
  bool progress();
  /// Blocks until complete.
  void finish();
  bool active() const { return active_; }
  /// Bytes rank `rank` sends for n floats over `ranks` ranks; it receives what rank - 1 sends.
  static int64_t expected_bytes(int64_t n, int ranks, int rank);

 private:
  struct Piece {
    float* data;
    int64_t size;
  };
  void post();
  /// The parts of chunk c, segment by segment.
  std::vector<Piece> pieces(int c) const;
  int64_t chunk_begin(int c) const;
  int mod(int v) const { return ((v % size_) + size_) % size_; }

  Comm& comm_;
  int tag_;
  int size_ = 1, rank_ = 0;
  std::vector<Segment> segments_;
  std::vector<int64_t> offsets_;  // segment start in the whole vector
  int64_t n_ = 0;
  float scale_ = 1.f;
  int step_ = 0;  // 0..N-2 reduce-scatter, N-1..2N-3 all-gather
  std::vector<int> requests_;
  bool active_ = false;
  std::vector<float> incoming_;
};

}  // namespace mosaic::dist
