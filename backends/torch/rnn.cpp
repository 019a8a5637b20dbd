// torch: RNN, GRU and LSTM on the shared recurrence (backends/common/rnn.hpp) with ATen's
// GEMM for its products (at::mm / addmm on Mosaic's buffers, no copies). ATen's own
// at::lstm and at::gru differentiate through autograd, which this plugin does not run, so
// the recurrence and its backpropagation through time are Mosaic's and the products ATen's,
// as im2col's are OpenBLAS's and onednn's oneDNN's.
#include "backends/common/rnn.hpp"
#include "backends/common/support.hpp"
#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {
namespace {

/// Row-major C = op(A) op(B) + beta C with ATen, on views of the caller's arrays.
void aten_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float beta, float* c, int64_t ldc) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  float* pa = const_cast<float*>(a);
  float* pb = const_cast<float*>(b);
  const at::Tensor A = ta ? at::from_blob(pa, {k, m}, {lda, 1}, opts).t() : at::from_blob(pa, {m, k}, {lda, 1}, opts);
  const at::Tensor B = tb ? at::from_blob(pb, {n, k}, {ldb, 1}, opts).t() : at::from_blob(pb, {k, n}, {ldb, 1}, opts);
  at::Tensor C = at::from_blob(c, {m, n}, {ldc, 1}, opts);
  if (beta == 0.f) at::mm_out(C, A, B);
  else C.addmm_(A, B, beta, 1.f);
}

}  // namespace

void add_rnn_kernels(BackendRegistration& r) { mosaic::add_rnn_kernels(r, aten_gemm, float32_data); }

}  // namespace mosaic::torch_backend
