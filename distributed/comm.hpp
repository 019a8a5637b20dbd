// The process group of a data-parallel run: Open MPI's MPI_COMM_WORLD behind a small
// interface, so the rest of Mosaic never includes mpi.h. Without mpirun the same calls
// run as a group of one (MPI's singleton start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace mosaic::dist {

/// Bytes of point-to-point messages (gradients, parameters) this rank has sent and received
/// through Comm. Control data (sum, broadcast, all_gather: losses, counters, checks) is
/// not counted.
struct Traffic {
  int64_t sent = 0, received = 0;
};

class Comm {
 public:
  /// Starts MPI once per process (later calls return the same group). Errors name what
  /// failed; a second start after finalize() is refused.
  static Expected<Comm*> world();
  /// True when this process was started by mpirun (Open MPI's environment is set).
  static bool launched_by_mpirun();
  /// Ends MPI if it was started (at exit of main).
  static void finalize();
  /// Ends every rank of the job: prints `message` prefixed with this rank, then MPI_Abort.
  [[noreturn]] void abort(const std::string& message, int code) const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string host() const;

  void barrier() const;
  /// In-place sums over all ranks (small control data: losses, counters).
  void sum(double* values, int count);
  void sum(int64_t* values, int count);
  /// Rank `root`'s bytes to every rank.
  void broadcast(void* data, std::size_t bytes, int root);
  /// Every rank's value, in rank order (on every rank).
  std::vector<double> all_gather(const std::vector<double>& mine);
  std::vector<uint64_t> all_gather(uint64_t mine);

  /// Non-blocking point-to-point: requests are opaque handles (index into an internal table).
  int isend(const void* data, std::size_t bytes, int to, int tag);
  int irecv(void* data, std::size_t bytes, int from, int tag);
  /// True (and the handle released) when the request has completed; never blocks.
  bool test(int request);
  /// Blocks until the request completes, then releases the handle.
  void wait(int request);

  const Traffic& traffic() const { return traffic_; }

 private:
  Comm() = default;
  int rank_ = 0, size_ = 1;
  Traffic traffic_;
};

}  // namespace mosaic::dist
