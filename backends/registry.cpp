#include "backends/registry.hpp"

#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "backends/im2col/im2col.hpp"
#include "backends/naive/naive.hpp"
#include "backends/onednn/onednn.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace mosaic {

KernelRegistry& mutable_registry_for_plugins() {
  static KernelRegistry registry = [] {
    KernelRegistry r;
    for (Status (*add)(KernelRegistry&) : {register_naive_kernels, register_im2col_kernels, register_onednn_kernels}) {
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

std::string blas_core_name() { return openblas_get_corename(); }

std::string onednn_isa_name() { return onednn_effective_isa(); }

std::vector<std::pair<std::string, std::string>> backend_library_versions() {
  std::vector<std::pair<std::string, std::string>> versions;
  const KernelRegistry& r = builtin_registry();
  for (const auto& name : r.backends()) {
    const BackendInfo* b = r.info(name);
    if (!b->details) continue;
    for (auto& lv : b->details()) versions.push_back(std::move(lv));
  }
  return versions;
}

void set_num_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

}  // namespace mosaic
