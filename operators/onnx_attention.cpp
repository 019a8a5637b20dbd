#include "operators/onnx_attention.hpp"

#include <cmath>

#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_onnx_attention(const OpContext& c) {
  for (size_t i = 0; i < 6 && i < c.inputs.size(); ++i) {
    if (!c.has_input(i) || i == 3) continue;
    if (!dtype_is_float(c.inputs[i].dtype))
      return Status::invalid(c.node->label() + ": input " + std::to_string(i) + " must be a float tensor, got " +
                             dtype_name(c.inputs[i].dtype));
    if (c.inputs[i].dtype != c.inputs[0].dtype && i != 1 && i != 2 && i != 4 && i != 5)
      return Status::invalid(c.node->label() + ": input " + std::to_string(i) + " differs in type from Q");
  }
  MOSAIC_ASSIGN_OR_RETURN(OnnxAttentionParams p, onnx_attention_params(c));
  const DType t = c.inputs[0].dtype;
  return std::vector<TensorDesc>{{t, p.y}, {c.inputs[1].dtype, p.present_key}, {c.inputs[2].dtype, p.present_value}, {t, p.qk}};
}

// Q K^T and P V: 2 FLOPs per multiply-add; softmax ~5 per score.
double f_onnx_attention(const OpContext& c) {
  auto p = onnx_attention_params(c);
  if (!p.ok()) return 0;
  const double scores = static_cast<double>(p->batch * p->q_heads * p->q_len * p->total_len);
  return scores * (2.0 * static_cast<double>(p->head_size) + 2.0 * static_cast<double>(p->v_head_size) + 5.0);
}

}  // namespace

Expected<OnnxAttentionParams> onnx_attention_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &q = ctx.inputs[0].shape, &k = ctx.inputs[1].shape, &v = ctx.inputs[2].shape;
  OnnxAttentionParams p;
  if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4))
    return Status::invalid(n.label() + ": Q, K and V must all be 3-D or all 4-D, got " + shape_str(q) + ", " +
                           shape_str(k) + ", " + shape_str(v));
  p.three_d = q.size() == 3;
  const bool heads_given = n.has_attr("q_num_heads") || n.has_attr("kv_num_heads");
  if (p.three_d) {
    p.q_heads = n.attr_int("q_num_heads", 0);
    p.kv_heads = n.attr_int("kv_num_heads", 0);
    if (p.q_heads <= 0 || p.kv_heads <= 0)
      return Status::invalid(n.label() + ": 3-D inputs need q_num_heads and kv_num_heads > 0");
    if (q[2] % p.q_heads || k[2] % p.kv_heads || v[2] % p.kv_heads)
      return Status::invalid(n.label() + ": hidden sizes " + shape_str({q[2], k[2], v[2]}) +
                             " do not divide into q_num_heads " + std::to_string(p.q_heads) + " and kv_num_heads " +
                             std::to_string(p.kv_heads));
    p.batch = q[0];
    p.q_len = q[1];
    p.kv_len = k[1];
    p.head_size = q[2] / p.q_heads;
    p.v_head_size = v[2] / p.kv_heads;
    if (k[2] / p.kv_heads != p.head_size)
      return Status::invalid(n.label() + ": K's head size " + std::to_string(k[2] / p.kv_heads) + " differs from Q's " +
                             std::to_string(p.head_size));
    if (v[1] != p.kv_len || k[0] != p.batch || v[0] != p.batch)
      return Status::invalid(n.label() + ": K " + shape_str(k) + " and V " + shape_str(v) + " disagree with Q " + shape_str(q));
  } else {
    if (heads_given && ctx.opset >= 25)
      return Status::invalid(n.label() + ": q_num_heads and kv_num_heads are for 3-D inputs only");
    p.batch = q[0];
    p.q_heads = q[1];
    p.q_len = q[2];
    p.head_size = q[3];
    p.kv_heads = k[1];
    p.kv_len = k[2];
    p.v_head_size = v[3];
    if (k[0] != p.batch || v[0] != p.batch || v[1] != p.kv_heads || v[2] != p.kv_len || k[3] != p.head_size)
      return Status::invalid(n.label() + ": K " + shape_str(k) + " and V " + shape_str(v) + " disagree with Q " + shape_str(q));
  }
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0)
    return Status::invalid(n.label() + ": " + std::to_string(p.q_heads) + " query heads do not group over " +
                           std::to_string(p.kv_heads) + " key/value heads");
  p.has_past = ctx.has_input(4) || ctx.has_input(5);
  if (p.has_past) {
    if (!ctx.has_input(4) || !ctx.has_input(5))
      return Status::invalid(n.label() + ": past_key and past_value come together");
    const Shape &pk = ctx.inputs[4].shape, &pv = ctx.inputs[5].shape;
    if (pk.size() != 4 || pv.size() != 4 || pk[0] != p.batch || pk[1] != p.kv_heads || pk[3] != p.head_size ||
        pv[0] != p.batch || pv[1] != p.kv_heads || pv[2] != pk[2] || pv[3] != p.v_head_size)
      return Status::invalid(n.label() + ": past_key " + shape_str(pk) + " and past_value " + shape_str(pv) +
                             " do not match [batch, kv_heads, past, head_size]");
    p.past_len = pk[2];
  }
  p.total_len = p.past_len + p.kv_len;
  p.has_nonpad = ctx.has_input(6);
  if (p.has_nonpad) {
    if (p.has_past) return Status::invalid(n.label() + ": nonpad_kv_seqlen cannot be combined with past_key");
    if (!is_index_dtype(ctx.inputs[6].dtype) || ctx.inputs[6].shape != Shape{p.batch})
      return Status::invalid(n.label() + ": nonpad_kv_seqlen must be int64 of shape [" + std::to_string(p.batch) + "]");
  }
  p.has_mask = ctx.has_input(3);
  if (p.has_mask) {
    p.mask = ctx.inputs[3].shape;
    p.mask_bool = ctx.inputs[3].dtype == DType::kBool;
    if (!p.mask_bool && !dtype_is_float(ctx.inputs[3].dtype))
      return Status::invalid(n.label() + ": attn_mask must be bool or float, got " + dtype_name(ctx.inputs[3].dtype));
    const Shape full{p.batch, p.q_heads, p.q_len, p.total_len};
    if (p.mask.empty() || p.mask.size() > 4 || p.mask.back() > p.total_len)
      return Status::invalid(n.label() + ": attn_mask " + shape_str(p.mask) + " does not broadcast onto " + shape_str(full));
    for (size_t d = 0; d + 1 < p.mask.size(); ++d) {
      const int64_t m = p.mask[p.mask.size() - 1 - (d + 1)], f = full[full.size() - 1 - (d + 1)];
      if (m != 1 && m != f)
        return Status::invalid(n.label() + ": attn_mask " + shape_str(p.mask) + " does not broadcast onto " + shape_str(full));
    }
  }
  p.causal = n.attr_int("is_causal", 0) != 0;
  p.scale = n.has_attr("scale") ? n.attr_float("scale", 1.f) : 1.0 / std::sqrt(static_cast<double>(p.head_size));
  p.softcap = n.attr_float("softcap", 0.f);
  p.qk_mode = static_cast<int>(n.attr_int("qk_matmul_output_mode", 0));
  if (p.qk_mode < 0 || p.qk_mode > 3)
    return Status::invalid(n.label() + ": qk_matmul_output_mode must be 0 to 3, got " + std::to_string(p.qk_mode));
  p.left_window = n.attr_int("left_window_size", -1);
  p.right_window = n.attr_int("right_window_size", -1);
  if (p.left_window < -1 || p.right_window < -1)
    return Status::invalid(n.label() + ": window sizes must be -1 or non-negative");
  p.y = p.three_d ? Shape{p.batch, p.q_len, p.q_heads * p.v_head_size} : Shape{p.batch, p.q_heads, p.q_len, p.v_head_size};
  p.present_key = {p.batch, p.kv_heads, p.total_len, p.head_size};
  p.present_value = {p.batch, p.kv_heads, p.total_len, p.v_head_size};
  p.qk = {p.batch, p.q_heads, p.q_len, p.total_len};
  return p;
}

Expected<RotaryParams> rotary_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &cos = ctx.inputs[1].shape, &sin = ctx.inputs[2].shape;
  RotaryParams p;
  p.four_d = x.size() == 4;
  if (x.size() != 3 && x.size() != 4) return Status::invalid(n.label() + ": X must be 3-D or 4-D, got " + shape_str(x));
  p.batch = x[0];
  if (p.four_d) {
    p.heads = x[1];
    p.seq = x[2];
    p.head_size = x[3];
  } else {
    p.seq = x[1];
    p.heads = n.attr_int("num_heads", 0);
    if (p.heads <= 0 || x[2] % p.heads != 0)
      return Status::invalid(n.label() + ": 3-D X needs num_heads dividing its hidden size " + std::to_string(x[2]));
    p.head_size = x[2] / p.heads;
  }
  p.rotary = n.attr_int("rotary_embedding_dim", 0);
  if (p.rotary == 0) p.rotary = p.head_size;
  if (p.rotary < 0 || p.rotary > p.head_size || p.rotary % 2)
    return Status::invalid(n.label() + ": rotary_embedding_dim " + std::to_string(p.rotary) +
                           " must be even and at most the head size " + std::to_string(p.head_size));
  p.interleaved = n.attr_int("interleaved", 0) != 0;
  p.has_positions = ctx.has_input(3);
  const int64_t half = p.rotary / 2;
  if (cos != sin) return Status::invalid(n.label() + ": cos_cache " + shape_str(cos) + " and sin_cache " + shape_str(sin) + " differ");
  if (p.has_positions) {
    if (ctx.inputs[3].shape != Shape{p.batch, p.seq} || !is_index_dtype(ctx.inputs[3].dtype))
      return Status::invalid(n.label() + ": position_ids must be int64 [" + std::to_string(p.batch) + "," +
                             std::to_string(p.seq) + "]");
    if (cos.size() != 2 || cos[1] != half)
      return Status::invalid(n.label() + ": with position_ids the caches must be [max_position, " + std::to_string(half) +
                             "], got " + shape_str(cos));
    p.max_position = cos[0];
  } else if (cos != Shape{p.batch, p.seq, half}) {
    return Status::invalid(n.label() + ": without position_ids the caches must be [" + std::to_string(p.batch) + "," +
                           std::to_string(p.seq) + "," + std::to_string(half) + "], got " + shape_str(cos));
  }
  return p;
}

namespace {

Expected<std::vector<TensorDesc>> infer_rotary(const OpContext& c) {
  for (size_t i = 0; i < 3; ++i)
    if (!dtype_is_float(c.inputs[i].dtype))
      return Status::invalid(c.node->label() + ": input " + std::to_string(i) + " must be a float tensor");
  MOSAIC_RETURN_IF_ERROR(rotary_params(c).status());
  return std::vector<TensorDesc>{c.inputs[0]};
}

double f_rotary(const OpContext& c) { return 3.0 * static_cast<double>(c.inputs[0].numel()); }

}  // namespace

void add_onnx_attention_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& r = add_schema(table, "RotaryEmbedding", 3, 4, infer_rotary, f_rotary,
                           "each head's first rotary_embedding_dim features rotated by cos/sin of the position");
  r.shape_inputs = {3};
  OpSchema& s = add_schema(table, "Attention", 3, 7, infer_onnx_attention, f_onnx_attention,
                           "softmax(Q K^T * scale + mask) V per head, grouped KV heads, KV cache, causal/window masks");
  s.max_outputs = 4;
  s.shape_inputs = {6};
}

}  // namespace mosaic
