// ONNX's Attention (opsets 23, 24, 25): scaled dot-product attention over 3-D
// ([batch, sequence, heads * head_size]) or 4-D ([batch, heads, sequence, head_size]) Q, K,
// V, with grouped-query heads, a boolean or additive mask (shorter masks padded), causal
// and sliding-window masking aligned to the end of the cache, a KV cache (past_key/value in,
// present_key/value out), the valid cache lengths of version 24 (nonpad_kv_seqlen), softcap,
// and the QK product at one of four stages as a fourth output. Not the fused op Mosaic's
// fusion pass writes (FusedAttention, operators/attention.hpp). Also RotaryEmbedding (opset
// 23): rotates the first rotary_embedding_dim features of each head by the cached cos/sin
// of its position, halves or interleaved pairs.
#pragma once

#include <map>
#include <string>

#include "operators/op_context.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OpSchema;

struct OnnxAttentionParams {
  int64_t batch = 1, q_heads = 1, kv_heads = 1;
  int64_t q_len = 1, kv_len = 1, past_len = 0, total_len = 1;  ///< total = past + kv
  int64_t head_size = 1, v_head_size = 1;
  bool three_d = false;  ///< inputs and Y are [batch, sequence, heads * head_size]
  bool causal = false;
  double scale = 1, softcap = 0;
  int qk_mode = 0;  ///< qk_matmul_output: 0/1 the (soft-capped) product, 2 with the mask added, 3 the softmax
  int64_t left_window = -1, right_window = -1;  ///< -1: unbounded (version 25)
  bool has_mask = false, mask_bool = false, has_past = false, has_nonpad = false;
  Shape mask;  ///< as given; broadcast onto [batch, q_heads, q_len, total_len], the last axis padded
  Shape y, present_key, present_value, qk;
};

Expected<OnnxAttentionParams> onnx_attention_params(const OpContext& ctx);

struct RotaryParams {
  int64_t batch = 1, seq = 1, heads = 1, head_size = 1, rotary = 1;  ///< rotary: features rotated
  bool four_d = false;  ///< X is [batch, heads, seq, head_size]; else [batch, seq, heads * head_size]
  bool interleaved = false, has_positions = false;
  int64_t max_position = 0;  ///< rows of the caches when positions index them
};
Expected<RotaryParams> rotary_params(const OpContext& ctx);
/// Attention and RotaryEmbedding.
void add_onnx_attention_schema(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
