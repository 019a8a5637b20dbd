// Backward helpers shared by the optimised backends where a backward is plain
// arithmetic on plain tensors (broadcast binary ops, batched MatMul given a GEMM).
#pragma once

#include <string>

#include <algorithm>
#include <cstdint>
#include <functional>

#include "operators/eltwise.hpp"
#include "core/kernel.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// Zeroes gradient output i of a backward call if it is requested, and returns it (nullptr
/// when it is not). For inputs a kernel does not differentiate, and for accumulating rules.
inline float* zeroed_grad(const BackwardArgs& a, size_t i) {
  if (i >= a.diff_src.size() || !a.diff_src[i]) return nullptr;
  float* p = a.diff_src[i]->f32();
  std::fill(p, p + a.diff_src[i]->numel(), 0.f);
  return p;
}

/// Gradients of y = a OP b with numpy broadcasting: da (shape a) and db (shape b) are
/// overwritten with dy's contributions summed over the axes each operand was broadcast
/// along. Either may be null.
void binary_backward(BinaryOp op, const Shape& a_shape, const Shape& b_shape, const Shape& out, const float* a,
                     const float* b, const float* dy, float* da, float* db);


/// Row-major C = op(A) op(B) + beta C, as cblas_sgemm / dnnl_sgemm.
using GemmFn = std::function<void(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc)>;

/// Gradients of a batched, broadcast MatMul: dA = dY B^T and dB = A^T dY per batch,
/// summed over the batches an operand was broadcast to. Either output may be null.
void matmul_backward(const MatMulParams& p, const float* a, const float* b, const float* dy, float* da, float* db,
                     const GemmFn& gemm);

/// BatchNormalization's training statistics over N x spatial per channel of x [N, C, sp]:
/// mean[c] and invstd[c] = 1 / sqrt(biased var + eps), two passes in double; the running
/// averages follow ONNX / PyTorch, r = momentum r + (1 - momentum) batch, with the
/// unbiased variance.
void batch_norm_statistics(const float* x, int64_t n, int64_t c, int64_t sp, double eps, double momentum, double* mean,
                           double* invstd, float* running_mean, float* running_var);

}  // namespace mosaic
