// The oneDNN backend's registration, version and error functions. Its kernels are in one file per
// family (conv, pool, gemm, eltwise, norm, movement); what they share is in onednn_internal.hpp and
// common.cpp.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>

#include "core/promote.hpp"
#include "backends/common/ms_quantize.hpp"
#include "backends/common/quantize.hpp"
#include "backends/common/attention.hpp"
#include "backends/common/detection.hpp"
#include "backends/common/selection.hpp"
#include "backends/common/indexing.hpp"
#include "backends/common/layer_norm.hpp"
#include "backends/common/logic.hpp"
#include "backends/common/pointwise.hpp"
#include "backends/common/resize.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/rnn.hpp"
#include "backends/common/support.hpp"
#include "backends/common/rearrange.hpp"
#include "backends/onednn/onednn_internal.hpp"
#include "core/events.hpp"

namespace mosaic {

double onednn_bf16_gemm_gflops(int n, int runs) {
  try {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::dims dims{n, n};
    const dnnl::memory::desc a(dims, dt::bf16, dnnl::memory::format_tag::ab), c(dims, dt::f32, dnnl::memory::format_tag::ab);
    dnnl::matmul prim(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, a, c), onednn_impl::engine()));
    dnnl::memory ma(a, onednn_impl::engine()), mb(a, onednn_impl::engine()), mc(c, onednn_impl::engine());
    // bfloat16 0.5 and 0.25 (0x3F00, 0x3E80): values whose products are exact.
    std::fill_n(static_cast<uint16_t*>(ma.get_data_handle()), static_cast<size_t>(n) * n, uint16_t{0x3F00});
    std::fill_n(static_cast<uint16_t*>(mb.get_data_handle()), static_cast<size_t>(n) * n, uint16_t{0x3E80});
    double best = 1e30;
    for (int r = 0; r <= runs; ++r) {  // the first run warms up
      const int64_t t0 = now_ns();
      prim.execute(onednn_impl::stream(), {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
      onednn_impl::stream().wait();
      if (r > 0) best = std::min(best, static_cast<double>(now_ns() - t0) / 1e9);
    }
    return 2.0 * n * static_cast<double>(n) * n / best / 1e9;
  } catch (const dnnl::error&) {
    return 0;  // no bfloat16 matmul here
  }
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (commit " +
         v->hash + ")";
}

bool onednn_sgemm(int n, const float* a, const float* b, float* c) {
  return dnnl_sgemm('N', 'N', n, n, n, 1.f, a, n, b, n, 0.f, c, n) == dnnl_success;
}

std::string onednn_effective_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

Status onednn_error_status(int status, const std::string& what, const Node& node) {
  const std::string msg = node.label() + ": oneDNN: " + what;
  if (status == dnnl_unimplemented) return Status::unsupported(msg + " (no implementation for this configuration)");
  const char* name = status == dnnl_out_of_memory       ? "out of memory"
                     : status == dnnl_invalid_arguments ? "invalid arguments"
                     : status == dnnl_runtime_error     ? "runtime error"
                                                        : "error";
  return Status::internal(msg + " (" + name + ", status " + std::to_string(status) + ")");
}

namespace {
/// Row-major C = op(A) op(B) + beta C with oneDNN's sgemm (single-threaded inside a parallel
/// region, multi-threaded outside one).
void dnnl_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
}
}  // namespace

/// bf16 needs the CPU's bfloat16 dot products (AVX512_BF16 or AMX): elsewhere oneDNN would
/// emulate them, slower than float32, which is no trade-off worth measuring.
std::string onednn_declines_precision(Precision p) {
  if (p == Precision::kF32) return "";
  if (p != Precision::kBF16) return std::string("oneDNN here computes in float32 or bf16, not ") + precision_name(p);
  const std::string isa = onednn_effective_isa();
  if (isa == "avx512_core_bf16" || isa == "avx512_core_amx") return "";
  return "oneDNN's instruction set here is " + isa +
         ", without bfloat16 dot products (AVX512_BF16 or AMX; ONEDNN_MAX_CPU_ISA may cap it)";
}

/// oneDNN's version and the instruction set its JIT uses here (ONEDNN_MAX_CPU_ISA caps it).
BackendProperties onednn_properties() {
  BackendProperties p;
  p.libraries = {{"oneDNN", onednn_version()}};
  p.kernels = {{"isa", onednn_effective_isa()}, {"loops", onednn_impl::loop_setting()}};
  for (const char* v : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MOSAIC_ONEDNN_LOOPS"})
    if (std::getenv(v)) p.forced_by.push_back(v);
  return p;
}

Status register_onednn(Registrar& registrar) {
  BackendRegistration r(registrar,
                        {"onednn",
                         "oneDNN primitives, in its blocked layouts along chains of layout-aware ops; "
                         "batch-1 Gemm by Mosaic's row GEMV; small tensors by Mosaic's loops",
                         onednn_properties, onednn_declines_precision});
  r.adapt(promote_float16);  // float16 and bfloat16 nodes widened on the host, as naive's
  onednn_impl::add_conv_kernels(r);
  onednn_impl::add_pool_kernels(r);
  onednn_impl::add_gemm_kernels(r);
  onednn_impl::add_eltwise_kernels(r);
  onednn_impl::add_norm_kernels(r);
  onednn_impl::add_movement_kernels(r);
  onednn_impl::add_reduce_kernels(r);
  onednn_impl::add_layer_norm_kernels(r);
  onednn_impl::add_int8_matmul_kernels(r);
  // The fused attention node: blocks of rows per thread, oneDNN's sgemm for the products.
  add_attention_kernel(r, dnnl_gemm, true);
  // Token models' index and mask ops: oneDNN has no primitive for them; the shared loops
  // (byte moves and comparisons) run them in place of a fallback to naive.
  for (const char* op : {"Split", "Gather", "Slice", "Cast", "CastLike"}) add_movement_kernel(r, op);
  add_logic_kernels(r);
  add_rearrange_kernels(r);
  add_pointwise_kernels(r);
  add_qdq_kernels(r);  // a QDQ model's activations between the float kernels
  add_fast_qlinear_add(r);  // and its residual Adds (core/fuse_qdq_codes.cpp)
  add_indexing_kernels(r);
  add_detection_kernels(r);
  add_selection_kernels(r);  // Compress, Unique
  add_resize_kernel(r);
  // The recurrent ops: the shared recurrence (backends/common/rnn.hpp) with oneDNN's sgemm.
  add_rnn_kernels(r, dnnl_gemm, float32_data);
  // RMSNorm (the fused decompositions of today's decoders): oneDNN's layer normalisation
  // subtracts the mean, so the shared row loop.
  add_rms_norm_loop_kernel(r);
  add_group_norm_loop_kernel(r);  // InstanceNormalization and GroupNormalization (common/layer_norm.hpp)
  add_view_kernels(r);
  return r.status();
}

}  // namespace mosaic
