#include "backends/registry.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backends/naive/naive.hpp"
#if MOSAIC_WITH_IM2COL
#include "backends/im2col/im2col.hpp"
extern "C" void openblas_set_num_threads(int);
#endif
#if MOSAIC_WITH_ONEDNN
#include "backends/onednn/onednn.hpp"
#endif

namespace mosaic {

KernelRegistry& mutable_registry_for_plugins() {
  static KernelRegistry registry = [] {
    KernelRegistry r;
    // The built-ins this build has (CMake's MOSAIC_WITH_IM2COL, MOSAIC_WITH_ONEDNN), the
    // oracle first.
    Status (*const builtins[])(KernelRegistry&) = {
        register_naive_kernels,
#if MOSAIC_WITH_IM2COL
        register_im2col_kernels,
#endif
#if MOSAIC_WITH_ONEDNN
        register_onednn_kernels,
#endif
    };
    for (auto add : builtins) {
      Status st = add(r);
      if (!st.is_ok()) {  // a built-in registering a duplicate: a bug, caught by every test run
        std::fprintf(stderr, "mosaic: built-in backends: %s\n", st.to_string().c_str());
        std::abort();
      }
    }
    return r;
  }();
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


void set_num_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
#if MOSAIC_WITH_IM2COL
  openblas_set_num_threads(threads);
#endif
}

}  // namespace mosaic
