#include "distributed/comm.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace mosaic::dist {
namespace {

bool g_started = false, g_finalized = false;
Comm* g_world = nullptr;
// Outstanding requests: handles index this table; released slots are reused.
std::vector<MPI_Request> g_requests;
std::vector<int> g_free;
// Communicators: Comm::handle_ indexes this table; 0 is MPI_COMM_WORLD.
std::vector<MPI_Comm> g_comms;
// Shared-memory windows: SharedWindow::handle_ indexes this table.
std::vector<MPI_Win> g_windows;

MPI_Comm mpi(int handle) { return g_comms[static_cast<size_t>(handle)]; }

int new_request() {
  if (!g_free.empty()) {
    const int h = g_free.back();
    g_free.pop_back();
    return h;
  }
  g_requests.push_back(MPI_REQUEST_NULL);
  return static_cast<int>(g_requests.size()) - 1;
}

int to_count(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    std::fprintf(stderr, "mosaic: a message of %zu bytes exceeds MPI's int count\n", bytes);
    MPI_Abort(MPI_COMM_WORLD, 70);
  }
  return static_cast<int>(bytes);
}

}  // namespace

Expected<Comm*> Comm::world() {
  if (g_world) return g_world;
  if (g_finalized) return Status::internal("MPI was finalized; it cannot start again in this process");
  int provided = 0;
  // Only the training thread calls MPI (the data loader thread never does).
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    return Status::internal("MPI_Init_thread failed (is Open MPI installed, and was the job started by mpirun?)");
  g_started = true;
  g_comms = {MPI_COMM_WORLD};
  auto* c = new Comm();
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size_);
  g_world = c;
  return c;
}

void Comm::finalize() {
  if (!g_started || g_finalized) return;
  MPI_Finalize();
  g_finalized = true;
  delete g_world;
  g_world = nullptr;
}

void Comm::abort(const std::string& message, int code) const {
  std::fprintf(stderr, "mosaic: rank %d of %d (%s): %s\n", rank_, size_, host().c_str(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string Comm::host() const {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return name;
}

Comm::~Comm() {
  if (handle_ != 0 && !g_finalized) {
    MPI_Comm c = mpi(handle_);
    MPI_Comm_free(&c);
  }
}

std::unique_ptr<Comm> Comm::split(int color) const {
  MPI_Comm c;
  MPI_Comm_split(mpi(handle_), color, rank_, &c);
  auto out = std::unique_ptr<Comm>(new Comm());
  g_comms.push_back(c);
  out->handle_ = static_cast<int>(g_comms.size()) - 1;
  MPI_Comm_rank(c, &out->rank_);
  MPI_Comm_size(c, &out->size_);
  return out;
}

void Comm::send_control(const double* values, int count, int to, int tag) {
  MPI_Send(values, count, MPI_DOUBLE, to, tag, mpi(handle_));
}

int Comm::recv_control(double* values, int count, int from, int tag) {
  MPI_Status status;
  MPI_Recv(values, count, MPI_DOUBLE, from < 0 ? MPI_ANY_SOURCE : from, tag, mpi(handle_), &status);
  return status.MPI_SOURCE;
}

void Comm::sum(double* values, int count) {
  MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_DOUBLE, MPI_SUM, mpi(handle_));
}

void Comm::broadcast(void* data, std::size_t bytes, int root) {
  MPI_Bcast(data, to_count(bytes), MPI_BYTE, root, mpi(handle_));
}

std::vector<double> Comm::all_gather(const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<std::size_t>(size_));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
                MPI_DOUBLE, mpi(handle_));
  return all;
}

std::vector<uint64_t> Comm::all_gather(uint64_t mine) {
  std::vector<uint64_t> all(static_cast<std::size_t>(size_));
  MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, mpi(handle_));
  return all;
}

int Comm::isend(const void* data, std::size_t bytes, int to, int tag, bool counted) {
  const int h = new_request();
  MPI_Isend(data, to_count(bytes), MPI_BYTE, to, tag, mpi(handle_), &g_requests[static_cast<std::size_t>(h)]);
  if (counted) traffic_.sent += static_cast<int64_t>(bytes);
  return h;
}

int Comm::irecv(void* data, std::size_t bytes, int from, int tag, bool counted) {
  const int h = new_request();
  MPI_Irecv(data, to_count(bytes), MPI_BYTE, from, tag, mpi(handle_), &g_requests[static_cast<std::size_t>(h)]);
  if (counted) traffic_.received += static_cast<int64_t>(bytes);
  return h;
}

bool Comm::test(int request) {
  int done = 0;
  MPI_Test(&g_requests[static_cast<std::size_t>(request)], &done, MPI_STATUS_IGNORE);
  if (done) g_free.push_back(request);
  return done != 0;
}

void Comm::wait(int request) {
  MPI_Wait(&g_requests[static_cast<std::size_t>(request)], MPI_STATUS_IGNORE);
  g_free.push_back(request);
}

bool Comm::one_node() const {
  MPI_Comm node;
  MPI_Comm_split_type(mpi(handle_), MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  int n = 0;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  int all = 0;  // every rank must see the whole group on its node
  const int mine = n == size_ ? 1 : 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, mpi(handle_));
  return all == 1;
}

Expected<std::shared_ptr<SharedWindow>> Comm::allocate_shared(std::size_t bytes) const {
  const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
  MPI_Info info;
  MPI_Info_create(&info);
  // Each rank's part on its own pages (near the core that writes it), not packed together.
  MPI_Info_set(info, "alloc_shared_noncontig", "true");
  void* mine = nullptr;
  MPI_Win win;
  MPI_Errhandler before;  // a failed allocation comes back as an error, not an abort
  MPI_Comm_get_errhandler(mpi(handle_), &before);
  MPI_Comm_set_errhandler(mpi(handle_), MPI_ERRORS_RETURN);
  const int rc = MPI_Win_allocate_shared(static_cast<MPI_Aint>(rounded), 64, info, mpi(handle_), &mine, &win);
  MPI_Comm_set_errhandler(mpi(handle_), before);
  MPI_Errhandler_free(&before);
  MPI_Info_free(&info);
  int ok = rc == MPI_SUCCESS ? 1 : 0, all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, mpi(handle_));
  if (!all) {
    if (ok) MPI_Win_free(&win);
    char text[MPI_MAX_ERROR_STRING] = {0};
    int len = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, text, &len);
    return Status::internal("MPI_Win_allocate_shared of " + std::to_string(rounded) + " bytes per rank failed" +
                            (rc != MPI_SUCCESS ? std::string(" on this rank: ") + text : std::string(" on another rank")));
  }
  auto w = std::shared_ptr<SharedWindow>(new SharedWindow());
  g_windows.push_back(win);
  w->handle_ = static_cast<int>(g_windows.size()) - 1;
  for (int r = 0; r < size_; ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    void* base = nullptr;
    MPI_Win_shared_query(win, r, &size, &unit, &base);
    w->bases_.push_back(static_cast<char*>(base));
  }
  std::memset(mine, 0, rounded);
  MPI_Barrier(mpi(handle_));  // every part is zero before anyone reads it
  return w;
}

SharedWindow::~SharedWindow() {
  if (handle_ >= 0 && !g_finalized) MPI_Win_free(&g_windows[static_cast<size_t>(handle_)]);
}

}  // namespace mosaic::dist
