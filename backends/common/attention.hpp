// FusedAttention's arithmetic (operators/attention.hpp), written once over the backend's
// GEMM: for matrix b and rows [r0, r1) of Q, S = Q[r0:r1] Kt in a scratch block (one GEMM),
// each row scaled, masked and normalised by softmax while it is in cache, then
// O[r0:r1] = P V (one GEMM). The unfused graph writes and rereads the [.., Tq, Tk] scores
// four times (MatMul, Div, Add, Softmax); the fused kernel keeps a block of them per thread.
#pragma once

#include "backends/common/grad.hpp"
#include "core/registration.hpp"
#include "operators/attention.hpp"

namespace mosaic {

/// Rows [r0, r1) of matrix b: `scores` holds (r1 - r0) * tk floats of scratch.
void attention_rows(const AttentionParams& p, const float* q, const float* kt, const float* v, const float* mask,
                    float* out, int64_t b, int64_t r0, int64_t r1, float* scores, const GemmFn& gemm);

/// Registers a FusedAttention kernel on a backend. `parallel`: blocks of rows run on
/// OpenMP threads, each calling `gemm` (which must then be thread-safe and run
/// single-threaded inside a parallel region, as oneDNN's sgemm does); otherwise one thread.
void add_attention_kernel(BackendRegistration& r, GemmFn gemm, bool parallel);

}  // namespace mosaic
