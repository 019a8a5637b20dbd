// A fully connected layer at batch 1 as a matrix-vector product that streams its weights
// once at the memory's rate, and small matrix products on the calling thread, shared by the
// CPU backends' Gemm and MatMul kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// y[i] = alpha * dot(w[i, :], x) for the n rows of a row-major [n, k] matrix w, split over
/// the OpenMP threads by blocks of 4 rows (each row read once, x from cache). Bound by the
/// memory's bandwidth when w is large: on the 2-core development VM it reads 268 MB at
/// 41-45 GB/s, where oneDNN's matmul reads its prepacked weights at 29 GB/s and OpenBLAS's
/// sgemv at 36 (docs/performance.md, "AlexNet at batch 1").
void gemv_rows(const float* w, const float* x, float* y, int64_t n, int64_t k, float alpha);

/// The same product from a constant op(B) packed once as panels of kGemvPanel outputs,
/// [ceil(n / P)][k][P] (zero-padded), so that each thread reads its share of the weights as
/// eight long sequential streams, whatever B's shape: 1.4x gemv_rows on short rows such as
/// GPT-2's [50257, 768] head (bench/gemv_layouts.cpp, docs/generation.md). A panel row is one
/// vector register: 16 floats where the build targets AVX-512, else 8 (AVX2).
#if defined(__AVX512F__)
inline constexpr int64_t kGemvPanel = 16;
#else
inline constexpr int64_t kGemvPanel = 8;
#endif
int64_t gemv_panel_floats(int64_t n, int64_t k);
/// op(B) is B [k, n], or B [n, k] when trans_b.
void pack_gemv_panels(const float* b, bool trans_b, int64_t n, int64_t k, float* panels);
void gemv_panels(const float* panels, const float* x, float* y, int64_t n, int64_t k, float alpha);
/// The same layout in bfloat16 (the weights rounded to nearest even, half the bytes to read):
/// the product in float32 of x (as given: callers round it to bfloat16 for bf16 plans) and the
/// rounded weights.
void pack_gemv_panels_bf16(const float* b, bool trans_b, int64_t n, int64_t k, uint16_t* panels);
void gemv_panels_bf16(const uint16_t* panels, const float* x, float* y, int64_t n, int64_t k, float alpha);
/// The panels of a constant B, packed once for every kernel that multiplies by the same
/// weights while any of them lives: the plans a generation builds (one per planned length)
/// share them, instead of holding a copy each (llama-1b: 4.1 GB per plan). Keyed by B's
/// address, layout and size; the entry pins B's buffer, so no other tensor can take its
/// address while the panels live. Constant inputs of inference plans are never written.
/// `type`: kF32, or kBF16 for bfloat16 panels (pack_gemv_panels_bf16).
std::shared_ptr<const Tensor> shared_gemv_panels(const Tensor& b, bool trans_b, int64_t n, int64_t k,
                                                 DType type = DType::kF32);
/// Y[m, n] = alpha * A[m, k] op(B) for a few rows of A (a decoder's step at a small batch)
/// against the same panels: each panel is read from memory once for all the rows,
/// kPanelRowsPerPass rows at a time against three panels (3 x that many accumulators; the
/// panels re-read from the cache for the next rows), each a stream prefetched 64 rows ahead.
void gemm_panels(const float* panels, const float* a, int64_t lda, float* y, int64_t ldy, int64_t m, int64_t n,
                 int64_t k, float alpha);
void gemm_panels_bf16(const uint16_t* panels, const float* a, int64_t lda, float* y, int64_t ldy, int64_t m, int64_t n,
                      int64_t k, float alpha);
/// Rows of A per pass over a group of panels: 8 with AVX-512's 32 vector registers (24
/// accumulators), 4 with AVX2's 16 (12), so that a decode step at batch 8 on AVX-512 reads each
/// panel from memory once and computes it once.
#if defined(__AVX512F__)
inline constexpr int kPanelRowsPerPass = 8;
#else
inline constexpr int kPanelRowsPerPass = 4;
#endif

/// Row-major C[m, n] = A[m, k] B[k, n] for products small enough that a library call's fixed
/// cost (1-3 us: argument checks, a thread fork) would be most of the time: each row of C
/// accumulated over k in a loop over n the compiler vectorises, on the calling thread.
void small_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                int64_t ldc);
/// The multiply-adds up to which small_gemm beats oneDNN's matmul primitive on the 2-core
/// development VM: 4.8x at 8K, 1.5x at 131K, 0.64x at 524K (bench/small_ops.py;
/// docs/performance.md, "Small tensors").
inline constexpr double kSmallGemmMaxMacs = 131072;

/// The rows up to which the panels run a product (gemm_panels): a decoder's step at batch 16.
/// A decode step of GPT-2 small (`bench/ab_binaries.py`, 2 threads) against oneDNN's matmul:
/// 1.9-2.3x at 2 rows, 1.6x at 8, 1.1-1.2x at 16, 0.94x at 24; against OpenBLAS's sgemm
/// 2.0-3.0x up to 8 rows, 1.2-1.3x at 16 (docs/generation.md, "A few rows").
inline constexpr int64_t kPanelRowsMax = 16;

/// A Gemm of one row of A (batch 1), or of up to kPanelRowsMax rows by a constant B, in an
/// inference plan in float32 (or bf16: bfloat16 panels and A, float32 sums; a constant B only): a constant B is packed once into the panels' layout; a run-time B
/// with transB = 1 ([N, K], PyTorch's Linear) is read in place by gemv_rows (one row only).
/// Then beta * C (shared by every row) and the fused activation.
class RowGemv {
 public:
  /// Whether it takes the node (else the caller runs its own matrix product).
  bool init(const KernelContext& ctx, const GemmParams& p);
  /// The same for a MatMul whose product has at most kPanelRowsMax rows (A [rows, K] or
  /// [b, s, K] with b * s rows: a decoder's step at a small batch) by a constant 2-d B, which
  /// is packed as B^T once. A run-time B (beyond one row), or more rows, is left to the caller.
  bool init_matmul(const KernelContext& ctx, const MatMulParams& p);
  bool active() const { return active_; }
  void run(const Tensor& a, const Tensor& b, const Tensor* c, Tensor& y) const;
  size_t workspace_bytes() const {
    return (packed_ ? packed_->bytes() : 0) + (bf16_ ? static_cast<size_t>(p_.m * p_.k) * sizeof(float) : 0);
  }

 private:
  bool active_ = false;
  GemmParams p_;
  std::shared_ptr<const Tensor> packed_;  ///< a constant B in gemv_panels' layout (shared_gemv_panels)
  int64_t c_elems_ = 0;
  Activation act_;
  bool bf16_ = false;              ///< a bf16 plan: bfloat16 panels, A rounded to bfloat16 (a16_)
  mutable std::vector<float> a16_;
};

}  // namespace mosaic
