// The im2col backend's registration and version functions. Its kernels are in one file per family
// (conv, pool, gemm, eltwise, norm); what they share is in im2col_internal.hpp.
#include <cstdlib>
#include <Eigen/Core>
#include <cblas.h>

#include "core/promote.hpp"
#include "backends/common/ms_quantize.hpp"
#include "backends/common/quantize.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/layer_norm.hpp"
#include "backends/common/detection.hpp"
#include "backends/common/selection.hpp"
#include "backends/common/indexing.hpp"
#include "backends/common/logic.hpp"
#include "backends/common/pointwise.hpp"
#include "backends/common/reduce.hpp"
#include "backends/common/resize.hpp"
#include "backends/common/rnn.hpp"
#include "backends/common/support.hpp"
#include "backends/common/rearrange.hpp"
#include "backends/im2col/blas_core.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic {

/// OpenBLAS's build and Eigen's version; the kernel family OpenBLAS runs on this CPU
/// (OPENBLAS_CORETYPE overrides its detection) and, when Mosaic replaced a fallback core
/// OpenBLAS took for a CPU it does not know (blas_core.cpp), the core it took.
BackendProperties im2col_properties() {
  std::string blas = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  if (blas.rfind("OpenBLAS ", 0) == 0) blas = blas.substr(9);
  BackendProperties p;
  p.libraries = {{"OpenBLAS", blas}, {"Eigen", eigen_version()}};
  p.kernels = {{"blas_core", openblas_get_corename()}};
  if (const std::string took = im2col_impl::openblas_core_detected(); !took.empty())
    p.kernels.emplace_back("blas_core_detected", took + " (OpenBLAS's fallback for this CPU; Mosaic chose blas_core from cpuid)");
  if (std::getenv("OPENBLAS_CORETYPE")) p.forced_by.push_back("OPENBLAS_CORETYPE");
  return p;
}

Status register_im2col(Registrar& registrar) {
  im2col_impl::choose_openblas_core();  // before any BLAS call
  BackendRegistration r(registrar, {"im2col",
                                   "im2col/col2im + OpenBLAS sgemm for convolutions and Gemm (batch 1: Mosaic's "
                                   "row GEMV), Eigen for the rest",
                                   im2col_properties, nullptr});
  r.adapt(promote_float16);  // float16 and bfloat16 nodes widened on the host, as naive's
  im2col_impl::add_conv_kernels(r);
  im2col_impl::add_pool_kernels(r);
  im2col_impl::add_gemm_kernels(r);
  im2col_impl::add_eltwise_kernels(r);
  im2col_impl::add_norm_kernels(r);
  add_view_kernels(r);
  for (const char* op : {"Transpose", "Concat", "Split", "Pad", "Gather", "Slice", "Cast", "CastLike"}) add_movement_kernel(r, op);
  add_reduce_loop_kernels(r, float32_data);  // no BLAS or Eigen call fits every axis set
  add_layer_norm_loop_kernel(r, float32_only);
  add_rms_norm_loop_kernel(r);  // the fused RMSNorm decompositions (core/fuse_layer_norm.cpp)
  add_group_norm_loop_kernel(r);  // InstanceNormalization and GroupNormalization (common/layer_norm.hpp)
  add_logic_kernels(r);  // masks and broadcasts: byte moves, nothing for BLAS or Eigen
  add_rearrange_kernels(r);  // DepthToSpace, OneHot, BitCast...: byte moves too
  add_pointwise_kernels(r);
  add_qdq_kernels(r);  // a QDQ model's activations between the float kernels
  add_fast_qlinear_add(r);  // and its residual Adds (core/fuse_qdq_codes.cpp)
  add_indexing_kernels(r);
  add_detection_kernels(r);
  add_selection_kernels(r);  // Compress, Unique
  add_resize_kernel(r);
  add_rnn_kernels(r, im2col_impl::cblas_gemm, float32_data);  // the shared recurrence, sgemm products
  return r.status();
}

std::string eigen_version() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

}  // namespace mosaic
