// Internal to the im2col backend: what its kernel families share (Eigen maps, fused
// activations, deterministic sums, 1-d/2-d windows), and the registration function of each
// family. Not a public header.
#pragma once

#include <Eigen/Core>
#include <cstdint>

#include "backends/im2col/im2col.hpp"
#include "core/registration.hpp"
#include "operators/params.hpp"

namespace mosaic::im2col_impl {

/// Sum in an order that depends only on n, never on the address (Eigen's vectorised sum
/// peels to alignment first, so the same values in another buffer round differently):
/// 16 strided partial sums, added in a fixed order. Vectorises as well.
float ordered_sum(const float* p, int64_t n);

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

/// y = op(x) over n contiguous floats (y may be x): Eigen's vectorised forms of the common
/// ops, the table row's scalar rule for the others.
void unary_forward_block(UnaryOp op, const UnaryArgs& a, const float* x, float* y, int64_t n);
/// dx = dy * op'(x) over n floats; x and y as the row's backward_reads_* say (else null).
void unary_backward_block(UnaryOp op, const UnaryArgs& a, const float* x, const float* y, const float* dy, float* dx,
                          int64_t n);
/// Applies a fused activation to n contiguous floats.
void apply_activation(const Activation& act, float* y, int64_t n);

/// 1-d and 2-d windows as 2-d (H = 1 for 1-d).
struct Win2 {
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

/// `w` as a 2-d window; 3-d and larger windows are unsupported (the planner falls back).
Expected<Win2> lift2(const Window& w, const Node& node);

/// conv_dense.cpp: an inference convolution on a map no larger than its kernel, at batch 8 or
/// more, as one dense matrix product (backends/common/conv_dense.hpp); a null kernel where
/// that does not apply.
Expected<std::unique_ptr<Kernel>> small_map_conv(const KernelContext& ctx);
// The kernel families, each in its own file; register.cpp calls them.
void add_conv_kernels(BackendRegistration& r);
void add_pool_kernels(BackendRegistration& r);
void add_gemm_kernels(BackendRegistration& r);
void add_eltwise_kernels(BackendRegistration& r);
void add_norm_kernels(BackendRegistration& r);

/// Row-major C = op(A) op(B) + beta C by cblas_sgemm (a GemmFn: MatMul's backward, RNNs).
void cblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace mosaic::im2col_impl
