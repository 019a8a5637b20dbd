// The sequence mixers of linear-attention and state-space models (opset 27: Gated DeltaNet in
// Qwen3.5, Mamba in Jamba and FalconMamba), each carrying a recurrent state from one call to
// the next for decoding:
// - LinearAttention: query, key, value [B, T, heads * d] (q_num_heads query heads sharing
//   kv_num_heads key/value heads), a state S [B, kv heads, d_k, d_v] per key/value head,
//   updated token by token by the update_rule (linear: S += k v^T; gated: S = exp(g) S +
//   k v^T; delta: S += beta k (v - S^T k)^T; gated_delta: both, the correction read from the
//   decayed state), each output scale * q^T S after the token's update. Outputs: output
//   [B, T, q heads * d_v] and present_state.
// - CausalConvWithState: a depthwise 1-D convolution over input [B, C, L] with past_state
//   [B, C, k - 1] (zeros where absent) before it, weight [C, 1, k], optional bias and fused
//   SiLU; present_state the padded sequence's last k - 1 positions.
#pragma once

#include <map>
#include <string>

#include "ir/status.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

enum class LinearUpdate { kLinear, kGated, kDelta, kGatedDelta };

struct LinearAttentionParams {
  int64_t b = 1, t = 1, q_heads = 1, kv_heads = 1, dk = 1, dv = 1;
  LinearUpdate rule = LinearUpdate::kGatedDelta;
  bool decay_per_key = false;  ///< decay [B, T, kv heads * d_k]; else one per head [B, T, kv heads]
  int64_t beta_heads = 1;      ///< beta [B, T, kv heads] or [B, T, 1]
  bool has_past = false;
  double scale = 1;
  bool gated() const { return rule == LinearUpdate::kGated || rule == LinearUpdate::kGatedDelta; }
  bool delta() const { return rule == LinearUpdate::kDelta || rule == LinearUpdate::kGatedDelta; }
};
Expected<LinearAttentionParams> linear_attention_params(const OpContext& ctx);

struct CausalConvParams {
  int64_t b = 1, c = 1, l = 0, k = 1;
  bool has_bias = false, has_past = false, silu = false;
};
Expected<CausalConvParams> causal_conv_params(const OpContext& ctx);

void add_linear_attention_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
