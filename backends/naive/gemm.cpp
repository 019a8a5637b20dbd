// The naive oracle's gemm and MatMul: triple loops, forward and backward.
#include "backends/common/broadcast.hpp"
#include "backends/common/grad.hpp"
#include "backends/naive/naive_internal.hpp"

namespace mosaic::naive_impl {
namespace {

class GemmKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    if (p_.has_c) c_shape_ = ctx.inputs[2].shape;
    act_ = fused_activation(*ctx.node);
    node_ = ctx.node;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    const float* c = p_.has_c ? src[2]->f32() : nullptr;
    float* y = dst[0]->f32();
    // C broadcasts as [1|M, 1|N].
    const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1;
    const int64_t cn = c_shape_.empty() ? 1 : c_shape_.back();
    for (int64_t i = 0; i < p_.m; ++i)
      for (int64_t j = 0; j < p_.n; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < p_.k; ++k) {
          const double av = p_.trans_a ? a[k * p_.m + i] : a[i * p_.k + k];
          const double bv = p_.trans_b ? b[j * p_.k + k] : b[k * p_.n + j];
          acc += av * bv;
        }
        const double cv = c ? c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] : 0.0;
        y[i * p_.n + j] = act_.apply(static_cast<float>(p_.alpha * acc + p_.beta * cv));
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    MOSAIC_RETURN_IF_ERROR(no_fused_backward(act_, *node_));
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    auto opA = [&](int64_t i, int64_t k) { return p_.trans_a ? A[k * p_.m + i] : A[i * p_.k + k]; };
    auto opB = [&](int64_t k, int64_t j) { return p_.trans_b ? B[j * p_.k + k] : B[k * p_.n + j]; };
    if (float* dA = zeroed_grad(a, 0))
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t k = 0; k < p_.k; ++k) {
          double acc = 0;
          for (int64_t j = 0; j < p_.n; ++j) acc += static_cast<double>(dy[i * p_.n + j]) * opB(k, j);
          (p_.trans_a ? dA[k * p_.m + i] : dA[i * p_.k + k]) = static_cast<float>(p_.alpha * acc);
        }
    if (float* dB = zeroed_grad(a, 1))
      for (int64_t k = 0; k < p_.k; ++k)
        for (int64_t j = 0; j < p_.n; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < p_.m; ++i) acc += static_cast<double>(opA(i, k)) * dy[i * p_.n + j];
          (p_.trans_b ? dB[j * p_.k + k] : dB[k * p_.n + j]) = static_cast<float>(p_.alpha * acc);
        }
    if (float* dC = zeroed_grad(a, 2)) {
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
      std::vector<double> acc(static_cast<size_t>(a.diff_src[2]->numel()), 0.0);
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) acc[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] += p_.beta * dy[i * p_.n + j];
      for (size_t i = 0; i < acc.size(); ++i) dC[i] = static_cast<float>(acc[i]);
    }
    return Status::ok();
  }

 private:
  GemmParams p_;
  Shape c_shape_;
  Activation act_;
  const Node* node_ = nullptr;
};

class MatMulKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return p.status().with_context(ctx.node->label());
    p_ = p.value();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t oa, int64_t ob) {
      const float* ab = a + oa * p_.m * p_.k;
      const float* bb = b + ob * p_.k * p_.n;
      float* yb = y + bi * p_.m * p_.n;
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < p_.k; ++k) acc += static_cast<double>(ab[i * p_.k + k]) * bb[k * p_.n + j];
          yb[i * p_.n + j] = static_cast<float>(acc);
        }
    });
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dA = zeroed_grad(a, 0);
    float* dB = zeroed_grad(a, 1);
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t oa, int64_t ob) {
      const float* g = dy + bi * p_.m * p_.n;
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j)
          for (int64_t k = 0; k < p_.k; ++k) {
            if (dA) dA[oa * p_.m * p_.k + i * p_.k + k] += g[i * p_.n + j] * B[ob * p_.k * p_.n + k * p_.n + j];
            if (dB) dB[ob * p_.k * p_.n + k * p_.n + j] += A[oa * p_.m * p_.k + i * p_.k + k] * g[i * p_.n + j];
          }
    });
    return Status::ok();
  }

 private:
  MatMulParams p_;
};

}  // namespace

void add_gemm_kernels(BackendRegistration& r) {
  r.kernel("Gemm", make_factory<GemmKernel>());
  r.kernel("MatMul", make_factory<MatMulKernel>());
}

}  // namespace mosaic::naive_impl
