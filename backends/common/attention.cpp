// FusedAttention's kernel (backends/common/attention.hpp).
#include "backends/common/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backends/common/fast_exp.hpp"

namespace mosaic {

void attention_rows(const AttentionParams& p, const float* q, const float* kt, const float* v, const float* mask,
                    float* out, int64_t b, int64_t r0, int64_t r1, float* scores, const GemmFn& gemm) {
  const int64_t rows = r1 - r0, tk = p.tk;
  gemm(false, false, rows, tk, p.d, q + (b * p.tq + r0) * p.d, p.d, kt + b * p.d * tk, tk, 0.f, scores, tk);
  for (int64_t i = 0; i < rows; ++i) {
    float* s = scores + i * tk;
    if (mask) {
      const float* m = mask + p.mask_offset[static_cast<size_t>(b)] + (r0 + i) * p.mask_row;
      if (p.mask_col == 1)
        for (int64_t j = 0; j < tk; ++j) s[j] = p.scaled(s[j]) + m[j];
      else
        for (int64_t j = 0; j < tk; ++j) s[j] = p.scaled(s[j]) + m[j * p.mask_col];
    } else if (p.divide) {
      for (int64_t j = 0; j < tk; ++j) s[j] = s[j] / p.scale;
    } else {
      for (int64_t j = 0; j < tk; ++j) s[j] = s[j] * p.scale;
    }
    const float mx = max_array(s, tk);
    for (int64_t j = 0; j < tk; ++j) s[j] -= mx;
    exp_array(s, s, tk);
    const float inv = 1.f / sum_array(s, tk);
    for (int64_t j = 0; j < tk; ++j) s[j] *= inv;
  }
  gemm(false, false, rows, p.dv, tk, scores, tk, v + b * tk * p.dv, p.dv, 0.f, out + (b * p.tq + r0) * p.dv, p.dv);
}

namespace {

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(GemmFn gemm, bool parallel) : gemm_(std::move(gemm)), parallel_(parallel) {}

  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, attention_params(ctx));
    int threads = 1;
#ifdef _OPENMP
    if (parallel_) threads = omp_get_max_threads();
#endif
    threads_ = threads;
    // Whole matrices per task when there are enough of them for every thread; otherwise
    // blocks of rows (at least 16), so that batch 1 with few heads still fills the threads.
    block_ = p_.tq;
    if (p_.batch < 2 * threads)
      block_ = std::max<int64_t>(16, (p_.tq * p_.batch + 2 * threads - 1) / (2 * threads));
    block_ = std::min(block_, std::max<int64_t>(p_.tq, 1));
    scratch_.assign(static_cast<size_t>(threads * block_ * p_.tk), 0.f);
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float *q = src[0]->f32(), *kt = src[1]->f32(), *v = src[2]->f32();
    const float* mask = src.size() > 3 && src[3] ? src[3]->f32() : nullptr;
    float* out = dst[0]->f32();
    const int64_t blocks = (p_.tq + block_ - 1) / block_, tasks = p_.batch * blocks;
    auto task = [&](int64_t t, int thread) {
      const int64_t b = t / blocks, r0 = (t % blocks) * block_;
      attention_rows(p_, q, kt, v, mask, out, b, r0, std::min(p_.tq, r0 + block_),
                     scratch_.data() + static_cast<size_t>(thread) * block_ * p_.tk, gemm_);
    };
    if (!parallel_) {
      for (int64_t t = 0; t < tasks; ++t) task(t, 0);
      return Status::ok();
    }
#ifdef _OPENMP
    // At most the threads the scratch was sized for (the count may have changed since init).
#pragma omp parallel for schedule(static) num_threads(threads_)
    for (int64_t t = 0; t < tasks; ++t) task(t, omp_get_thread_num());
#else
    for (int64_t t = 0; t < tasks; ++t) task(t, 0);
#endif
    return Status::ok();
  }

  size_t workspace_bytes() const override { return scratch_.size() * sizeof(float); }

 private:
  GemmFn gemm_;
  bool parallel_;
  AttentionParams p_;
  int64_t block_ = 1;
  int threads_ = 1;
  std::vector<float> scratch_;
};

}  // namespace

void add_attention_kernel(BackendRegistration& r, GemmFn gemm, bool parallel) {
  r.kernel(kAttentionOp,
           [gemm, parallel](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
             auto k = std::make_unique<AttentionKernel>(gemm, parallel);
             MOSAIC_RETURN_IF_ERROR(k->init(ctx));
             return std::unique_ptr<Kernel>(std::move(k));
           });
}

}  // namespace mosaic
