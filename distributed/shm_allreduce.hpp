// All-reduce of gradient buckets through one MPI-3 shared-memory window, for ranks that all
// run on one node (--collective shm, the default there).
//
// Every rank's gradients live in its part of the window (the plan computes them there), one
// bucket after another. A bucket of n floats is cut into N chunks. When every rank has made
// bucket b final (a flag in its part of the window), rank r sums chunk r of the N copies,
// in rank order, scales it, and writes the result into all N copies; then it raises its
// "done" flag, and the bucket is complete for everyone once all N flags are up. Each rank
// reads (N-1)/N of the bucket from its peers and writes as much into them: about 2·n floats
// of memory traffic per rank, against 4-6·n for the ring over copy-in/copy-out messages
// (each message is copied into a shared buffer and out again, then added). The sums are
// the same on every rank, bitwise, and do not depend on the order buckets were reduced.
//
// The flags are step counters (release stores, acquire loads), so no rank touches a peer's
// bucket before the peer has finished it in this step, and no rank computes the next
// step's gradients into a bucket before every peer has finished writing into it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/status.hpp"
#include "distributed/comm.hpp"

namespace mosaic::dist {

class ShmAllreduce {
 public:
  /// Collective over `comm` (every rank on one node). `bucket_floats[b]`: floats of bucket b
  /// (including any padding the caller lays out between tensors).
  static Expected<std::unique_ptr<ShmAllreduce>> create(Comm& comm, const std::vector<int64_t>& bucket_floats);

  /// This rank's copy of bucket b (64-byte aligned), where its gradients must be computed.
  float* bucket(size_t b) const;
  int64_t floats(size_t b) const { return floats_[b]; }
  /// Keeps the window (and every bucket) alive while a holder (a gradient tensor) uses it.
  std::shared_ptr<void> keeper() const { return window_; }

  /// Before the step's backward.
  void begin_step();
  /// This rank's bucket b holds its final gradients for this step.
  void ready(size_t b);
  /// Reduces this rank's chunk of every bucket all ranks have made ready (scaling the sums
  /// by `scale`), without waiting. True once every bucket is complete on every rank.
  bool progress(float scale);
  /// Seconds of this rank spent summing and copying (communication) since creation.
  double work_s() const { return work_s_; }

  /// n rounded up to whole cache lines (16 floats): where the window puts buckets, and where
  /// callers put tensors within a bucket.
  static int64_t line_padded(int64_t n) { return (n + 15) / 16 * 16; }
  /// Bytes rank `rank` writes into (and reads from) its peers per step for a bucket of n floats.
  static int64_t expected_bytes(int64_t n, int ranks, int rank);

 private:
  ShmAllreduce(Comm& comm) : comm_(comm) {}
  int64_t* flag(int rank, size_t b, int which) const;
  void reduce(size_t b, float scale);

  Comm& comm_;
  std::shared_ptr<SharedWindow> window_;
  std::vector<int64_t> floats_, offset_;  // per bucket, in floats from the data start
  int64_t data_offset_ = 0;               // bytes from the start of each rank's part
  int64_t step_ = 0;
  std::vector<char> reduced_, complete_;
  double work_s_ = 0;
};

}  // namespace mosaic::dist
