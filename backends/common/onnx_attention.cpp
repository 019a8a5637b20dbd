#include "backends/common/onnx_attention.hpp"

#include <cmath>
#include <cstring>
#include <limits>

#include "operators/onnx_attention.hpp"

namespace mosaic {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

class OnnxAttentionKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, onnx_attention_params(ctx));
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const OnnxAttentionParams& p = p_;
    const int64_t B = p.batch, Hq = p.q_heads, Hkv = p.kv_heads, Sq = p.q_len, P = p.past_len,
                  T = p.total_len, D = p.head_size, Dv = p.v_head_size, group = Hq / Hkv;
    // present_key/value: the cache then the new keys, [B, Hkv, T, D] (3-D inputs split into heads).
    Tensor keys = dst.size() > 1 && dst[1] ? *dst[1] : Tensor::empty({DType::kF32, p.present_key});
    Tensor values = dst.size() > 2 && dst[2] ? *dst[2] : Tensor::empty({DType::kF32, p.present_value});
    fill_cache(src[1]->f32(), p.has_past ? src[4]->f32() : nullptr, keys.f32(), D);
    fill_cache(src[2]->f32(), p.has_past ? src[5]->f32() : nullptr, values.f32(), Dv);
    std::vector<int64_t> nonpad(static_cast<size_t>(B), T);
    if (p.has_nonpad)
      for (int64_t b = 0; b < B; ++b) nonpad[static_cast<size_t>(b)] = src[6]->i64()[b];
    const float* q = src[0]->f32();
    float* y = dst[0]->f32();
    float* qk_out = dst.size() > 3 && dst[3] ? dst[3]->f32() : nullptr;
    std::vector<double> score(static_cast<size_t>(T)), bias(static_cast<size_t>(T)), out(static_cast<size_t>(Dv));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / group;  // grouped heads: each KV head serves `group` query heads in turn
        const float* kh = keys.f32() + (b * Hkv + hk) * T * D;
        const float* vh = values.f32() + (b * Hkv + hk) * T * Dv;
        // The causal and window frontiers: after the cache, or the valid length less the queries.
        const int64_t offset = p.has_past ? P : p.has_nonpad ? nonpad[static_cast<size_t>(b)] - Sq : 0;
        for (int64_t i = 0; i < Sq; ++i) {
          const float* qi = p.three_d ? q + (b * Sq + i) * Hq * D + h * D : q + ((b * Hq + h) * Sq + i) * D;
          double bias_max = kNegInf;
          for (int64_t j = 0; j < T; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * kh[j * D + d];
            double s = dot * p.scale;
            if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
            score[static_cast<size_t>(j)] = s;
            double m = p.has_mask ? mask_value(src[3], b, h, i, j) : 0.0;
            if (p.causal && j > i + offset) m = kNegInf;
            const int64_t diff = i + offset - j;
            if ((p.left_window >= 0 && diff > p.left_window) || (p.right_window >= 0 && -diff > p.right_window))
              m = kNegInf;
            if (p.has_nonpad && j >= nonpad[static_cast<size_t>(b)]) m = kNegInf;
            bias[static_cast<size_t>(j)] = m;
            bias_max = std::max(bias_max, m);
          }
          float* qk_row = qk_out ? qk_out + ((b * Hq + h) * Sq + i) * T : nullptr;
          if (qk_row && p.qk_mode <= 1)
            for (int64_t j = 0; j < T; ++j) qk_row[j] = static_cast<float>(score[static_cast<size_t>(j)]);
          for (int64_t j = 0; j < T; ++j) score[static_cast<size_t>(j)] += bias[static_cast<size_t>(j)];
          if (qk_row && p.qk_mode == 2)
            for (int64_t j = 0; j < T; ++j) qk_row[j] = static_cast<float>(score[static_cast<size_t>(j)]);
          // Softmax; a row whose every key is masked (by the bias) attends to nothing: zeros.
          const bool all_masked = bias_max == kNegInf;
          double mx = kNegInf;
          for (int64_t j = 0; j < T; ++j) mx = std::max(mx, score[static_cast<size_t>(j)]);
          double sum = 0;
          for (int64_t j = 0; j < T; ++j) {
            double& s = score[static_cast<size_t>(j)];
            s = all_masked || mx == kNegInf ? 0.0 : std::exp(s - mx);
            sum += s;
          }
          for (int64_t j = 0; j < T; ++j) score[static_cast<size_t>(j)] /= sum == 0 ? 1.0 : sum;
          if (qk_row && p.qk_mode == 3)
            for (int64_t j = 0; j < T; ++j) qk_row[j] = static_cast<float>(score[static_cast<size_t>(j)]);
          std::fill(out.begin(), out.end(), 0.0);
          for (int64_t j = 0; j < T; ++j) {
            const double w = score[static_cast<size_t>(j)];
            if (w == 0) continue;
            for (int64_t d = 0; d < Dv; ++d) out[static_cast<size_t>(d)] += w * vh[j * Dv + d];
          }
          float* yi = p.three_d ? y + (b * Sq + i) * Hq * Dv + h * Dv : y + ((b * Hq + h) * Sq + i) * Dv;
          for (int64_t d = 0; d < Dv; ++d) yi[d] = static_cast<float>(out[static_cast<size_t>(d)]);
        }
      }
    return Status::ok();
  }

 private:
  /// present = concat(past, new) along the sequence, with 3-D new keys split into heads.
  void fill_cache(const float* fresh, const float* past, float* present, int64_t width) const {
    const OnnxAttentionParams& p = p_;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t h = 0; h < p.kv_heads; ++h) {
        float* row = present + (b * p.kv_heads + h) * p.total_len * width;
        if (past) std::memcpy(row, past + (b * p.kv_heads + h) * p.past_len * width, p.past_len * width * sizeof(float));
        for (int64_t s = 0; s < p.kv_len; ++s) {
          const float* from = p.three_d ? fresh + ((b * p.kv_len + s) * p.kv_heads + h) * width
                                        : fresh + ((b * p.kv_heads + h) * p.kv_len + s) * width;
          std::memcpy(row + (p.past_len + s) * width, from, width * sizeof(float));
        }
      }
  }
  /// The additive mask at (b, h, i, j): broadcast from the right; past its last axis -inf
  /// (false); a bool mask 0 where true, -inf where false.
  double mask_value(const Tensor* mask, int64_t b, int64_t h, int64_t i, int64_t j) const {
    const Shape& m = p_.mask;
    if (j >= m.back()) return kNegInf;
    const int64_t full[4] = {b, h, i, j};
    int64_t at = 0, stride = 1;
    for (size_t r = 0; r < m.size(); ++r) {
      const size_t axis = m.size() - 1 - r;
      const int64_t idx = m[axis] == 1 ? 0 : full[3 - r];
      at += idx * stride;
      stride *= m[axis];
    }
    if (p_.mask_bool) return mask->u8()[at] ? 0.0 : kNegInf;
    return mask->f32()[at];
  }

  OnnxAttentionParams p_;
};


class RotaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, rotary_params(ctx));
    label_ = ctx.node->label();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const RotaryParams& p = p_;
    const float *x = src[0]->f32(), *cos = src[1]->f32(), *sin = src[2]->f32();
    float* y = dst[0]->f32();
    const int64_t half = p.rotary / 2;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t s = 0; s < p.seq; ++s) {
        int64_t row = b * p.seq + s;  // the caches' row: (b, s), or the position there
        if (p.has_positions) {
          row = src[3]->i64()[b * p.seq + s];
          if (row < 0 || row >= p.max_position)
            return Status::invalid(label_ + ": position " + std::to_string(row) + " is outside the caches' " +
                                   std::to_string(p.max_position) + " rows");
        }
        const float *c = cos + row * half, *sn = sin + row * half;
        for (int64_t h = 0; h < p.heads; ++h) {
          const int64_t at = p.four_d ? ((b * p.heads + h) * p.seq + s) * p.head_size
                                      : ((b * p.seq + s) * p.heads + h) * p.head_size;
          const float* xi = x + at;
          float* yi = y + at;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t i1 = p.interleaved ? 2 * i : i, i2 = p.interleaved ? 2 * i + 1 : i + half;
            const double x1 = xi[i1], x2 = xi[i2];
            yi[i1] = static_cast<float>(c[i] * x1 - sn[i] * x2);
            yi[i2] = static_cast<float>(sn[i] * x1 + c[i] * x2);
          }
          for (int64_t i = p.rotary; i < p.head_size; ++i) yi[i] = xi[i];
        }
      }
    return Status::ok();
  }

 private:
  RotaryParams p_;
  std::string label_;
};

}  // namespace

void add_onnx_attention_kernel(BackendRegistration& r) {
  r.kernel("Attention", make_factory<OnnxAttentionKernel>());
  r.kernel("RotaryEmbedding", make_factory<RotaryKernel>());
}

}  // namespace mosaic
