// The im2col backend's gemm and MatMul through OpenBLAS sgemm.
#include <algorithm>
#include <cblas.h>
#include <cstdint>
#include <cstring>

#include "backends/common/broadcast.hpp"
#include "backends/common/gemv.hpp"
#include "backends/common/grad.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {
namespace {

/// A BLAS leading dimension: at least 1 even for an empty matrix (a product over K = 0, whose
/// result is beta C), which BLAS refuses as an illegal value.
int64_t ld(int64_t d) { return std::max<int64_t>(d, 1); }

class GemmKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    if (p_.has_c) c_shape_ = ctx.inputs[2].shape;
    act_ = fused_activation(*ctx.node);
    gemv_.init(ctx, p_);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (gemv_.active()) {
      gemv_.run(*src[0], *src[1], p_.has_c && p_.beta != 0.f ? src[2] : nullptr, *dst[0]);
      return Status::ok();
    }
    float* y = dst[0]->f32();
    float beta = 0.f;
    if (p_.has_c && p_.beta != 0.f) {
      const float* c = src[2]->f32();
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < p_.m; ++i) {
        const float* crow = c + (cm == 1 ? 0 : i) * cn;
        float* yr = y + i * p_.n;
        if (cn == 1) std::fill(yr, yr + p_.n, crow[0]);
        else std::memcpy(yr, crow, p_.n * sizeof(float));
      }
      beta = p_.beta;
    }
    if (p_.k == 0) {
      // A product over nothing is 0, so y = beta C: BLAS's sgemv returns at once for an empty
      // matrix, leaving C unscaled.
      for (int64_t i = 0; i < p_.m * p_.n; ++i) y[i] *= beta;
    } else if (p_.m == 1) {
      // A single row (batch 1): y = op(B)^T x as a matrix-vector product, which OpenBLAS
      // runs at memory bandwidth; x is contiguous whether or not A is transposed.
      cblas_sgemv(CblasRowMajor, p_.trans_b ? CblasNoTrans : CblasTrans, p_.trans_b ? p_.n : p_.k,
                  p_.trans_b ? p_.k : p_.n, p_.alpha, src[1]->f32(), ld(p_.trans_b ? p_.k : p_.n), src[0]->f32(), 1,
                  beta, y, 1);
    } else {
      cblas_sgemm(CblasRowMajor, p_.trans_a ? CblasTrans : CblasNoTrans, p_.trans_b ? CblasTrans : CblasNoTrans,
                  p_.m, p_.n, p_.k, p_.alpha, src[0]->f32(), ld(p_.trans_a ? p_.m : p_.k), src[1]->f32(),
                  ld(p_.trans_b ? p_.k : p_.n), beta, y, ld(p_.n));
    }
    if (act_.active()) {
#pragma omp parallel for schedule(static) if (p_.m * p_.n > 65536)
      for (int64_t i = 0; i < p_.m; ++i) apply_activation(act_, y + i * p_.n, p_.n);
    }
    return Status::ok();
  }

  bool has_backward() const override { return !act_.active(); }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = alpha dY op(B)^T, dB = alpha op(A)^T dY (each laid out as its operand), dC = beta
  /// dY summed over C's broadcast axes — all as sgemm calls with the matching transposes.
  Status backward(const BackwardArgs& a) override {
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    const int64_t M = p_.m, N = p_.n, K = p_.k;
    const float alpha = p_.alpha;
    if (a.diff_src[0]) {
      float* dA = a.diff_src[0]->f32();
      if (!p_.trans_a)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, p_.trans_b ? CblasNoTrans : CblasTrans, M, K, N, alpha, dy, ld(N), B,
                    ld(p_.trans_b ? K : N), 0.f, dA, ld(K));
      else
        cblas_sgemm(CblasRowMajor, p_.trans_b ? CblasTrans : CblasNoTrans, CblasTrans, K, M, N, alpha, B,
                    ld(p_.trans_b ? K : N), dy, ld(N), 0.f, dA, ld(M));
    }
    if (a.diff_src[1]) {
      float* dB = a.diff_src[1]->f32();
      if (!p_.trans_b)
        cblas_sgemm(CblasRowMajor, p_.trans_a ? CblasNoTrans : CblasTrans, CblasNoTrans, K, N, M, alpha, A,
                    ld(p_.trans_a ? M : K), dy, ld(N), 0.f, dB, ld(N));
      else
        cblas_sgemm(CblasRowMajor, CblasTrans, p_.trans_a ? CblasTrans : CblasNoTrans, N, K, M, alpha, dy, ld(N), A,
                    ld(p_.trans_a ? M : K), 0.f, dB, ld(K));
    }
    if (a.diff_src.size() > 2 && a.diff_src[2]) {
      float* dC = a.diff_src[2]->f32();
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
      std::fill(dC, dC + a.diff_src[2]->numel(), 0.f);
      for (int64_t i = 0; i < M; ++i) {
        float* row = dC + (cm == 1 ? 0 : i) * cn;
        if (cn == 1) row[0] += p_.beta * ordered_sum(dy + i * N, N);
        else ArrayMap(row, N) += p_.beta * ConstArrayMap(dy + i * N, N);
      }
    }
    return Status::ok();
  }

 private:
  size_t workspace_bytes() const override { return gemv_.workspace_bytes(); }

  GemmParams p_;
  Shape c_shape_;
  Activation act_;
  RowGemv gemv_;  ///< batch-1 inference: used instead of sgemv
};

class MatMulKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return p.status().with_context(ctx.node->label());
    p_ = p.value();
    // B shared by every batch entry and A contiguous: one GEMM with M = batch * m.
    fold_batch_ = shape_numel(p_.b_batch) == 1 && p_.a_batch == p_.batch;
    // One row by constant weights (a decoder's step at batch 1): Mosaic's gemv over B^T,
    // which reads the weights at about twice the rate of OpenBLAS 0.3.21's sgemm at M = 1
    // (1.9-2.5x, bench/gemv_layouts.cpp).
    gemv_.init_matmul(ctx, p_);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (gemv_.active()) {
      gemv_.run(*src[0], *src[1], nullptr, *dst[0]);
      return Status::ok();
    }
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    const int64_t nb = shape_numel(p_.batch);
    if (fold_batch_) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb * p_.m, p_.n, p_.k, 1.f, a, p_.k, b, p_.n, 0.f, y,
                  p_.n);
      return Status::ok();
    }
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t oa, int64_t ob) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p_.m, p_.n, p_.k, 1.f, a + oa * p_.m * p_.k, p_.k,
                  b + ob * p_.k * p_.n, p_.n, 0.f, y + bi * p_.m * p_.n, p_.n);
    });
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    matmul_backward(p_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                    a.diff_src[0] ? a.diff_src[0]->f32() : nullptr, a.diff_src[1] ? a.diff_src[1]->f32() : nullptr,
                    cblas_gemm);
    return Status::ok();
  }

  size_t workspace_bytes() const override { return gemv_.workspace_bytes(); }

 private:
  MatMulParams p_;
  bool fold_batch_ = false;
  RowGemv gemv_;  ///< one row by constant weights, inference
};

}  // namespace

void cblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f, a, lda, b,
              ldb, beta, c, ldc);
}

void add_gemm_kernels(BackendRegistration& r) {
  r.kernel("Gemm", make_factory<GemmKernel>());
  r.kernel("MatMul", make_factory<MatMulKernel>());
}

}  // namespace mosaic::im2col_impl
