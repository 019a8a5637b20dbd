// The process group of a data-parallel run: Open MPI's MPI_COMM_WORLD behind a small
// interface, so the rest of Mosaic never includes mpi.h. Without mpirun the same calls
// run as a group of one (MPI's singleton start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic::dist {

/// Bytes of point-to-point messages (gradients, parameters) this rank has sent and received
/// through Comm. Control data (sum, broadcast, all_gather: losses, counters, checks) is
/// not counted.
struct Traffic {
  int64_t sent = 0, received = 0;
};

/// Memory that every rank of a group maps (an MPI-3 shared-memory window): rank r's part
/// starts at base(r) in every process. Freed, collectively, when the last reference goes, so
/// every rank must drop its references in the same order (as they build and destroy the
/// same plans in the same order).
class SharedWindow {
 public:
  SharedWindow(const SharedWindow&) = delete;
  SharedWindow& operator=(const SharedWindow&) = delete;
  ~SharedWindow();
  char* base(int rank) const { return bases_[static_cast<size_t>(rank)]; }

 private:
  friend class Comm;
  SharedWindow() = default;
  int handle_ = -1;  // index into the table of MPI windows
  std::vector<char*> bases_;
};

class Comm {
 public:
  /// Starts MPI once per process (later calls return the same group). Errors name what
  /// failed; a second start after finalize() is refused.
  static Expected<Comm*> world();
  /// Ends MPI if it was started (at exit of main).
  static void finalize();
  /// The ranks of this group with the same `color`, as a new group (ranks keep their
  /// order). Collective over this group. Owned by the caller.
  std::unique_ptr<Comm> split(int color) const;
  ~Comm();
  /// Ends every rank of the job: prints `message` prefixed with this rank, then MPI_Abort.
  [[noreturn]] void abort(const std::string& message, int code) const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::string host() const;

  /// In-place sums over all ranks (small control data: losses, counters).
  void sum(double* values, int count);
  /// Rank `root`'s bytes to every rank.
  void broadcast(void* data, std::size_t bytes, int root);
  /// Every rank's value, in rank order (on every rank).
  std::vector<double> all_gather(const std::vector<double>& mine);
  std::vector<uint64_t> all_gather(uint64_t mine);

  /// Non-blocking point-to-point: requests are opaque handles (index into an internal table).
  /// `counted` = false keeps the bytes out of traffic() (checkpoint state, not training traffic).
  int isend(const void* data, std::size_t bytes, int to, int tag, bool counted = true);
  int irecv(void* data, std::size_t bytes, int from, int tag, bool counted = true);
  /// Small blocking messages that are not counted in traffic() (control: step flags, lr).
  void send_control(const double* values, int count, int to, int tag);
  /// Receives from `from` (or any rank: -1); returns the sender.
  int recv_control(double* values, int count, int from, int tag);
  /// True (and the handle released) when the request has completed; never blocks.
  bool test(int request);
  /// Blocks until the request completes, then releases the handle.
  void wait(int request);

  const Traffic& traffic() const { return traffic_; }
  /// Counts bytes moved without messages (through a SharedWindow) as traffic.
  void count(int64_t sent, int64_t received) {
    traffic_.sent += sent;
    traffic_.received += received;
  }

  /// True when every rank of this group runs on this node (collective).
  bool one_node() const;
  /// Collective: `bytes` (zeroed, 64-byte aligned) for this rank in one window every rank
  /// of the group can address. Only when one_node().
  Expected<std::shared_ptr<SharedWindow>> allocate_shared(std::size_t bytes) const;

 private:
  Comm() = default;
  int handle_ = 0;  // index into the table of MPI communicators (0: MPI_COMM_WORLD)
  int rank_ = 0, size_ = 1;
  Traffic traffic_;
};

}  // namespace mosaic::dist
