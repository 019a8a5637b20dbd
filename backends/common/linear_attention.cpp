#include "backends/common/linear_attention.hpp"

#include <cmath>
#include <vector>

#include "operators/linear_attention.hpp"

namespace mosaic {
namespace {

/// LinearAttention: one state [d_k, d_v] per (batch entry, key/value head), updated token by
/// token; each query head reads the state of its key/value head after the token's update.
class LinearAttentionKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, linear_attention_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t cells = p_.dk * p_.dv, group = p_.q_heads / p_.kv_heads;
    std::vector<double> state(static_cast<size_t>(p_.b * p_.kv_heads * cells), 0.0), v(static_cast<size_t>(p_.dv));
    if (p_.has_past)
      for (size_t i = 0; i < state.size(); ++i) state[i] = src[3]->f32()[i];
    const float *q = src[0]->f32(), *k = src[1]->f32(), *val = src[2]->f32();
    const float* decay = p_.gated() ? src[4]->f32() : nullptr;
    const float* beta = p_.delta() ? src[5]->f32() : nullptr;
    float* out = dst[0]->f32();
    for (int64_t b = 0; b < p_.b; ++b)
      for (int64_t t = 0; t < p_.t; ++t) {
        const int64_t token = b * p_.t + t;
        for (int64_t h = 0; h < p_.kv_heads; ++h) {
          double* s = state.data() + (b * p_.kv_heads + h) * cells;
          const float* kt = k + (token * p_.kv_heads + h) * p_.dk;
          const float* vt = val + (token * p_.kv_heads + h) * p_.dv;
          if (decay)  // S *= exp(g), g per head or per key row
            for (int64_t d = 0; d < p_.dk; ++d) {
              const double g = std::exp(static_cast<double>(
                  p_.decay_per_key ? decay[(token * p_.kv_heads + h) * p_.dk + d] : decay[token * p_.kv_heads + h]));
              for (int64_t m = 0; m < p_.dv; ++m) s[d * p_.dv + m] *= g;
            }
          for (int64_t m = 0; m < p_.dv; ++m) {
            v[static_cast<size_t>(m)] = vt[m];
            if (!beta) continue;  // the delta rule writes beta (v - S^T k)
            double retrieved = 0;
            for (int64_t d = 0; d < p_.dk; ++d) retrieved += s[d * p_.dv + m] * kt[d];
            const double bt = beta[token * p_.beta_heads + (p_.beta_heads == 1 ? 0 : h)];
            v[static_cast<size_t>(m)] = bt * (vt[m] - retrieved);
          }
          for (int64_t d = 0; d < p_.dk; ++d)
            for (int64_t m = 0; m < p_.dv; ++m) s[d * p_.dv + m] += kt[d] * v[static_cast<size_t>(m)];
          for (int64_t hq = h * group; hq < (h + 1) * group; ++hq) {
            const float* qt = q + (token * p_.q_heads + hq) * p_.dk;
            for (int64_t m = 0; m < p_.dv; ++m) {
              double o = 0;
              for (int64_t d = 0; d < p_.dk; ++d) o += qt[d] * s[d * p_.dv + m];
              out[(token * p_.q_heads + hq) * p_.dv + m] = static_cast<float>(p_.scale * o);
            }
          }
        }
      }
    if (dst.size() > 1 && dst[1])
      for (size_t i = 0; i < state.size(); ++i) dst[1]->f32()[i] = static_cast<float>(state[i]);
    return Status::ok();
  }

 private:
  LinearAttentionParams p_;
};

/// CausalConvWithState: position l of channel c sums weight[c, j] x the padded sequence's
/// l + j (past_state's k - 1 positions, or zeros, then input); present_state is the padded
/// sequence's last k - 1 positions.
class CausalConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, causal_conv_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t keep = p_.k - 1;
    const float *x = src[0]->f32(), *w = src[1]->f32();
    const float* bias = p_.has_bias ? src[2]->f32() : nullptr;
    const float* past = p_.has_past ? src[3]->f32() : nullptr;
    for (int64_t bc = 0; bc < p_.b * p_.c; ++bc) {
      const int64_t c = bc % p_.c;
      auto padded = [&](int64_t i) -> double {  // position i of [past | input]
        if (i >= keep) return x[bc * p_.l + i - keep];
        return past ? past[bc * keep + i] : 0.0;
      };
      for (int64_t l = 0; l < p_.l; ++l) {
        double acc = bias ? bias[c] : 0.0;
        for (int64_t j = 0; j < p_.k; ++j) acc += static_cast<double>(w[c * p_.k + j]) * padded(l + j);
        if (p_.silu) acc = acc / (1 + std::exp(-acc));
        dst[0]->f32()[bc * p_.l + l] = static_cast<float>(acc);
      }
      if (dst.size() > 1 && dst[1])
        for (int64_t i = 0; i < keep; ++i) dst[1]->f32()[bc * keep + i] = static_cast<float>(padded(p_.l + i));
    }
    return Status::ok();
  }

 private:
  CausalConvParams p_;
};

}  // namespace

void add_linear_attention_kernels(BackendRegistration& r) {
  r.kernel("LinearAttention", make_factory<LinearAttentionKernel>());
  r.kernel("CausalConvWithState", make_factory<CausalConvKernel>());
}

}  // namespace mosaic
