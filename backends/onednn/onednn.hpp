// The oneDNN backend: oneDNN 2.x primitives (convolution, pooling, matmul, eltwise,
// binary, softmax/logsoftmax, batch normalisation, LRN, concat, reorder). Primitives and
// prepacked weights are built once when a kernel is created; activations cross kernel
// boundaries in plain row-major layout, and kernels reorder to oneDNN's preferred
// blocked layouts internally where that is faster.
#pragma once

#include <string>

#include "core/registration.hpp"

namespace mosaic {

Status register_onednn(Registrar& registrar);
/// The Status for a dnnl::error (status code `status`, text `what`) raised for `node`. Only
/// dnnl_unimplemented, oneDNN's "no implementation for this configuration", is a decline
/// (kUnsupported: the planner falls back and reports why). Any other error (invalid arguments,
/// out of memory, a runtime error) is a failure of the library and is reported as one
/// (kInternal: the command stops with the message), never a quiet fallback.
Status onednn_error_status(int status, const std::string& what, const Node& node);
/// oneDNN's effective CPU instruction set, e.g. "avx512_core_amx".
std::string onednn_effective_isa();
/// "2.6.3 (commit ...)".
std::string onednn_version();
/// C = A B on n x n row-major matrices with oneDNN's own GEMM (dnnl_sgemm); false on error.
bool onednn_sgemm(int n, const float* a, const float* b, float* c);
/// Best-of-`runs` GFLOP/s of an n x n x n matmul of bfloat16 operands into float32 (oneDNN's,
/// as bf16 plans compute their products), after a warm-up run; 0 where oneDNN has none.
double onednn_bf16_gemm_gflops(int n, int runs);

}  // namespace mosaic
