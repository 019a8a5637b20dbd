#include "backends/registry.hpp"

#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/naive/naive.hpp"
#if MOSAIC_WITH_IM2COL
#include "backends/im2col/im2col.hpp"
extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);
extern "C" char* openblas_get_config(void);
#endif
#if MOSAIC_WITH_ONEDNN
#include "backends/onednn/onednn.hpp"
#endif

namespace mosaic {

KernelRegistry& mutable_registry_for_plugins() {
  // Filled in place: the control-flow kernels keep a reference to the registry they plan
  // subgraphs from (Registrar::registry()), which must be this object, not a temporary.
  static KernelRegistry registry;
  static const bool filled = [] {
    // The built-ins this build has (CMake's MOSAIC_WITH_IM2COL, MOSAIC_WITH_ONEDNN), the
    // oracle first; each is a registration function as a plugin's is (core/registration.hpp).
    Status (*const builtins[])(Registrar&) = {
        register_naive,
#if MOSAIC_WITH_IM2COL
        register_im2col,
#endif
#if MOSAIC_WITH_ONEDNN
        register_onednn,
#endif
    };
    for (auto add : builtins) {
      Status st = register_backend(registry, add);
      if (!st.is_ok()) {  // a built-in registering a duplicate: a bug, caught by every test run
        std::fprintf(stderr, "mosaic: built-in backends: %s\n", st.to_string().c_str());
        std::abort();
      }
    }
    return true;
  }();
  (void)filled;
  return registry;
}

const KernelRegistry& builtin_registry() { return mutable_registry_for_plugins(); }

std::string default_backend() {
  const std::vector<std::string> b = builtin_registry().backends();
  for (const char* preferred : {"onednn", "im2col"})
    if (std::find(b.begin(), b.end(), preferred) != b.end()) return preferred;
  return "naive";
}

std::vector<std::pair<std::string, BackendProperties>> backend_properties() {
  std::vector<std::pair<std::string, BackendProperties>> all;
  const KernelRegistry& r = builtin_registry();
  for (const auto& name : r.backends()) {
    const BackendInfo* b = r.info(name);
    if (b->properties) all.emplace_back(name, b->properties());
  }
  return all;
}

namespace {

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (uint64_t{1} << 30));
  return buf;
}

#if MOSAIC_WITH_IM2COL
// The address space OpenBLAS maps for each thread it adds: BUFFER_SIZE (32 << 22 bytes on
// x86_64, 0.3.21) and a page of alignment, rounded up. Measured: VmSize grows 128 MiB a
// thread from openblas_set_num_threads(2) to (16).
constexpr uint64_t kOpenblasBufferPerThread = (uint64_t{128} + 1) << 20;

// The most threads this OpenBLAS runs (its build's MAX_THREADS, in its config string); it
// caps a larger request there.
int openblas_max_threads() {
  const char* config = openblas_get_config();
  const char* at = config ? std::strstr(config, "MAX_THREADS=") : nullptr;
  const int n = at ? std::atoi(at + std::strlen("MAX_THREADS=")) : 0;
  return n > 0 ? n : 1 << 16;
}
#endif

// What a thread costs in address space wherever it runs: its stack (RLIMIT_STACK, as glibc
// sizes a new thread's; 8 MiB when unlimited would be 2 MiB, counted as 8) and a malloc arena
// (glibc maps 64 MiB for a thread's own arena on 64-bit).
uint64_t thread_space() {
  uint64_t stack = uint64_t{8} << 20;
  if (rlimit rl{}; getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) stack = rl.rlim_cur;
  return stack + (uint64_t{64} << 20);
}

// Reserves (and releases) the address space that going from the most threads this process
// has set (OpenBLAS keeps a thread's buffer mapped when the count drops, and reuses it) to
// `threads` will map, with two threads' worth more for the calling thread's first GEMM.
// OpenBLAS retries a failed mmap forever and libgomp ends the process when it cannot start a
// thread, so a failure here is the only error that names the cause.
Status reserve_thread_space(int threads) {
  static int had = omp_get_max_threads();  // the most threads set so far (the defaults at first)
  uint64_t per_thread = thread_space();
  int want = threads;
#if MOSAIC_WITH_IM2COL
  want = std::min(threads, openblas_max_threads());
  per_thread += kOpenblasBufferPerThread;
#endif
  if (want <= had) return Status::ok();
  const uint64_t bytes = static_cast<uint64_t>(want - had + 2) * per_thread;
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) {
    munmap(p, bytes);
    had = want;
    return Status::ok();
  }
  std::string limit = "the machine's address space";
  if (rlimit rl{}; getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    limit = "the address-space limit (ulimit -v) of " + gib(rl.rlim_cur);
  return Status::invalid("--threads " + std::to_string(threads) + ": each thread maps about " +
                         std::to_string(per_thread >> 20) +
                         " MiB of address space (stack, malloc arena"
#if MOSAIC_WITH_IM2COL
                         ", OpenBLAS buffer"
#endif
                         "), " + gib(bytes) + " more for " + std::to_string(want) + " threads, more than " + limit +
                         " leaves (OpenBLAS would retry its allocation forever): use fewer threads or raise the limit");
}

}  // namespace

Status set_num_threads(int threads) {
  if (threads <= 0) return Status::ok();
  MOSAIC_RETURN_IF_ERROR(reserve_thread_space(threads));
  omp_set_num_threads(threads);
#if MOSAIC_WITH_IM2COL
  openblas_set_num_threads(threads);
#endif
  return Status::ok();
}

}  // namespace mosaic
