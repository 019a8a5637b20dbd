#include "backends/registry.hpp"

#include <omp.h>

#include "backends/im2col/im2col.hpp"
#include "backends/naive/naive.hpp"
#include "backends/onednn/onednn.hpp"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace mosaic {

const KernelRegistry& builtin_registry() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_naive_kernels(r);
    register_im2col_kernels(r);
    register_onednn_kernels(r);
    return r;
  }();
  return registry;
}

std::string blas_core_name() { return openblas_get_corename(); }

std::string onednn_isa_name() { return onednn_effective_isa(); }

std::vector<std::pair<std::string, std::string>> backend_library_versions() {
  // openblas_get_config(): "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64".
  std::string blas = openblas_get_config();
  if (blas.rfind("OpenBLAS ", 0) == 0) blas = blas.substr(9);
  return {{"OpenBLAS", blas}, {"oneDNN", onednn_version()}, {"Eigen", eigen_version()}};
}

void set_num_threads(int threads) {
  if (threads <= 0) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

}  // namespace mosaic
