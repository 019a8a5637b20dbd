// The oneDNN backend's gemm and MatMul through the matmul primitive.
#include <algorithm>
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

/// dst = alpha * A x B (+ bias), A and B possibly transposed (via strides) and batched.
class MatMulBase : public Kernel {
 protected:
  Status build(const KernelContext& ctx, const memory::desc& a, const memory::desc& b, const memory::desc* bias,
               const memory::desc& y, float alpha, const Tensor* b_const) {
    return guarded(*ctx.node, [&]() -> Status {
      // bf16 plans: A and B are read as bfloat16 copies (a reorder per call; B once when constant).
      const dt ct = compute_type(ctx);
      const memory::desc a_want = ct == dt::f32 ? a : dense(a.dims(), ct);
      const memory::desc b_want = b_const ? memory::desc(b.dims(), ct, tag::any) : ct == dt::f32 ? b : dense(b.dims(), ct);
      auto d = bias ? dnnl::matmul::desc(a_want, b_want, *bias, y) : dnnl::matmul::desc(a_want, b_want, y);
      MOSAIC_ASSIGN_OR_RETURN(dnnl::primitive_attr attr, activation_attr(fused_activation(*ctx.node), *ctx.node));
      if (alpha != 1.f) attr.set_output_scales(0, {alpha});
      dnnl::matmul::primitive_desc pd(d, attr, engine());
      a_.init(a, pd.src_desc(), ctx.tracker, false);
      y_.mem = memory(y, engine(), DNNL_MEMORY_NONE);
      if (bias) bias_.mem = memory(*bias, engine(), DNNL_MEMORY_NONE);
      weights_.init(b, pd.weights_desc(), b_const, ctx.tracker);
      prim_ = dnnl::matmul(pd);
      return Status::ok();
    });
  }
  void run(const Tensor* a, const Tensor* b, const void* bias, Tensor* y) {
    a_.bind_in(a);
    y_.bind(y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_.internal}, {DNNL_ARG_WEIGHTS, weights_.get(b)}, {DNNL_ARG_DST, y_.mem}};
    if (bias) {
      bias_.mem.set_data_handle(const_cast<void*>(bias));
      args[DNNL_ARG_BIAS] = bias_.mem;
    }
    prim_.execute(stream(), args);
    stream().wait();
  }
  size_t workspace_bytes() const override { return weights_.bytes() + a_.owned_bytes(); }

 private:
  Staged a_;
  Bound y_, bias_;
  Weights weights_;
  dnnl::matmul prim_;
};

class GemmKernel final : public MatMulBase {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    const memory::desc a = p_.trans_a ? memory::desc({p_.m, p_.k}, dt::f32, {1, p_.m}) : plain({p_.m, p_.k});
    const memory::desc b = p_.trans_b ? memory::desc({p_.k, p_.n}, dt::f32, {1, p_.k}) : plain({p_.k, p_.n});
    const memory::desc y = plain({p_.m, p_.n});
    memory::desc bias_md;
    if (p_.has_c && p_.beta != 0.f) {
      Shape c = ctx.inputs[2].shape;
      while (c.size() < 2) c.insert(c.begin(), 1);
      bias_md = plain(c);
      c_elems_ = shape_numel(c);
      // oneDNN scales (A x B + bias) by alpha, so the bias is C * beta / alpha.
      if (p_.alpha == 0.f) return Status::unsupported(ctx.node->label() + ": alpha = 0");
      c_scale_ = p_.beta / p_.alpha;
      if (c_scale_ != 1.f) scaled_c_.resize(static_cast<size_t>(c_elems_));
      c_shape_ = ctx.inputs[2].shape;
    }
    MOSAIC_RETURN_IF_ERROR(build(ctx, a, b, c_elems_ ? &bias_md : nullptr, y, p_.alpha, ctx.constant(1)));
    if (ctx.training && !fused_activation(*ctx.node).active()) return build_backward(ctx);
    return Status::ok();
  }

  bool has_backward() const override { return trainable_; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = alpha dY op(B)^T and dB = alpha op(A)^T dY as matmuls whose transposes are strides;
  /// dC = beta dY summed over C's broadcast axes.
  Status backward(const BackwardArgs& a) override {
    if (a.diff_src[0]) {
      da_args_[0].mem.set_data_handle(const_cast<void*>(p_.trans_a ? a.src[1]->data() : a.diff_dst[0]->data()));
      da_args_[1].mem.set_data_handle(const_cast<void*>(p_.trans_a ? a.diff_dst[0]->data() : a.src[1]->data()));
      da_args_[2].bind(a.diff_src[0]);
      da_.execute(stream(), {{DNNL_ARG_SRC, da_args_[0].mem}, {DNNL_ARG_WEIGHTS, da_args_[1].mem},
                             {DNNL_ARG_DST, da_args_[2].mem}});
    }
    if (a.diff_src[1]) {
      db_args_[0].mem.set_data_handle(const_cast<void*>(p_.trans_b ? a.diff_dst[0]->data() : a.src[0]->data()));
      db_args_[1].mem.set_data_handle(const_cast<void*>(p_.trans_b ? a.src[0]->data() : a.diff_dst[0]->data()));
      db_args_[2].bind(a.diff_src[1]);
      db_.execute(stream(), {{DNNL_ARG_SRC, db_args_[0].mem}, {DNNL_ARG_WEIGHTS, db_args_[1].mem},
                             {DNNL_ARG_DST, db_args_[2].mem}});
    }
    stream().wait();
    if (a.diff_src.size() > 2 && a.diff_src[2]) {
      const float* dy = a.diff_dst[0]->f32();
      float* dc = a.diff_src[2]->f32();
      std::fill(dc, dc + a.diff_src[2]->numel(), 0.f);
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) dc[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] += p_.beta * dy[i * p_.n + j];
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const void* bias = nullptr;
    if (c_elems_) {
      bias = src[2]->data();
      if (!scaled_c_.empty()) {
        for (int64_t i = 0; i < c_elems_; ++i) scaled_c_[i] = c_scale_ * src[2]->f32()[i];
        bias = scaled_c_.data();
      }
    }
    run(src[0], src[1], bias, dst[0]);
    return Status::ok();
  }

 private:
  Status build_backward(const KernelContext& ctx) {
    return guarded(*ctx.node, [&]() -> Status {
      const int64_t M = p_.m, N = p_.n, K = p_.k;
      // A matrix of the given shape stored row-major, or the transpose of such a matrix.
      auto rm = [](int64_t r, int64_t c) { return memory::desc({r, c}, dt::f32, {c, 1}); };
      auto tr = [](int64_t r, int64_t c) { return memory::desc({r, c}, dt::f32, {1, r}); };
      dnnl::primitive_attr attr;
      if (p_.alpha != 1.f) attr.set_output_scales(0, {p_.alpha});
      auto make = [&](const memory::desc& s, const memory::desc& w, const memory::desc& d, dnnl::matmul& prim,
                      Bound* args) {
        prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(s, w, d), attr, engine()));
        args[0].mem = memory(s, engine(), DNNL_MEMORY_NONE);
        args[1].mem = memory(w, engine(), DNNL_MEMORY_NONE);
        args[2].mem = memory(d, engine(), DNNL_MEMORY_NONE);
      };
      // op(B) as [K, N] and its transpose [N, K], from B's storage; likewise op(A).
      const memory::desc opb_t = p_.trans_b ? rm(N, K) : tr(N, K);
      const memory::desc opb = p_.trans_b ? tr(K, N) : rm(K, N);
      const memory::desc opa_t = p_.trans_a ? rm(K, M) : tr(K, M);
      const memory::desc opa = p_.trans_a ? tr(M, K) : rm(M, K);
      if (!p_.trans_a) make(rm(M, N), opb_t, rm(M, K), da_, da_args_);  // dA = dY op(B)^T
      else make(opb, tr(N, M), rm(K, M), da_, da_args_);                // dA stored [K, M]: op(B) dY^T
      if (!p_.trans_b) make(opa_t, rm(M, N), rm(K, N), db_, db_args_);  // dB = op(A)^T dY
      else make(tr(N, M), opa, rm(N, K), db_, db_args_);                // dB stored [N, K]: dY^T op(A)
      trainable_ = true;
      return Status::ok();
    });
  }

  GemmParams p_;
  int64_t c_elems_ = 0;
  float c_scale_ = 1.f;
  std::vector<float> scaled_c_;
  Shape c_shape_;
  bool trainable_ = false;
  dnnl::matmul da_, db_;
  Bound da_args_[3], db_args_[3];
};

class MatMulKernel final : public MatMulBase {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return p.status().with_context(ctx.node->label());
    Shape a = p->a_batch, b = p->b_batch, y = p->batch;
    a.insert(a.end(), {p->m, p->k});
    b.insert(b.end(), {p->k, p->n});
    y.insert(y.end(), {p->m, p->n});
    if (a.size() > 12) return Status::unsupported(ctx.node->label() + ": rank above 12");
    p_ = p.value();
    return build(ctx, plain(a), plain(b), nullptr, plain(y), 1.f, ctx.constant(1));
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    run(src[0], src[1], nullptr, dst[0]);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = dY B^T, dB = A^T dY per batch with oneDNN's sgemm, summed over broadcasts.
  Status backward(const BackwardArgs& a) override {
    matmul_backward(p_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                    a.diff_src[0] ? a.diff_src[0]->f32() : nullptr, a.diff_src[1] ? a.diff_src[1]->f32() : nullptr,
                    [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                       int64_t ldb, float beta, float* C, int64_t ldc) {
                      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, A, lda, B, ldb, beta, C, ldc);
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

}  // namespace mosaic::onednn_impl
