// Which OpenBLAS kernels the im2col backend runs on. OpenBLAS built with DYNAMIC_ARCH (Debian's)
// picks its kernels at load from the CPU's family and model. A model newer than the build
// (Debian 12's 0.3.21 and Intel's Emerald Rapids, family 6 model 207) is not in its tables,
// and it falls back to its generic SSE3 kernels, "Prescott": sgemm several times slower than
// the AVX-512 kernels the CPU runs, with nothing said. When the user has not chosen a core
// (OPENBLAS_CORETYPE) and OpenBLAS took a pre-AVX2 core on a CPU that has AVX-512 (or AVX2 and
// FMA), the library is initialised again on the matching core through its DYNAMIC_ARCH entry
// points, as OPENBLAS_CORETYPE would have chosen at load, before any BLAS call. The backend's
// properties then say both: blas_core (what runs) and blas_core_detected (what OpenBLAS took).
#include <cblas.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

#include "backends/im2col/blas_core.hpp"

// OpenBLAS's DYNAMIC_ARCH entry points (driver/others/dynamic.c); absent from single-target
// builds, hence weak.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace mosaic::im2col_impl {
namespace {

/// The core the CPU's own features call for: SkylakeX for AVX-512 (F, BW, VL, DQ), Haswell for
/// AVX2 with FMA; empty otherwise. __builtin_cpu_supports also asks the OS (XGETBV) whether it
/// saves the wider registers.
std::string core_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

/// OpenBLAS's cores older than AVX2: what it falls back to on a CPU it does not know.
bool before_avx2(const std::string& core) {
  static const std::set<std::string> old = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                            "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"};
  return old.count(core) > 0;
}

std::string detected;  // what OpenBLAS took at load, when Mosaic chose another core
std::once_flag once;

}  // namespace

void choose_openblas_core() {
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_CORETYPE") || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return;
    const std::string took = openblas_get_corename(), want = core_for_this_cpu();
    if (want.empty() || !before_avx2(took)) return;
    // dynamic_init reads OPENBLAS_CORETYPE; it is set only for the call, so child processes
    // and the run's recorded environment see what the user set (nothing).
    setenv("OPENBLAS_CORETYPE", want.c_str(), 1);
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
    detected = took;
  });
}

std::string openblas_core_detected() { return detected; }

}  // namespace mosaic::im2col_impl
