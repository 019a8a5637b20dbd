#include "operators/linear_attention.hpp"

#include <cmath>

#include "operators/schema.hpp"

namespace mosaic {
namespace {

using Descs = std::vector<TensorDesc>;

Status all_float(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.has_input(i) && !dtype_is_float(c.inputs[i].dtype))
      return Status::unsupported(c.node->label() + ": " + c.node->op_type + " takes floating-point tensors, input " +
                                 std::to_string(i) + " is " + dtype_name(c.inputs[i].dtype));
  return Status::ok();
}

Expected<Descs> infer_linear_attention(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(all_float(c));
  MOSAIC_ASSIGN_OR_RETURN(LinearAttentionParams p, linear_attention_params(c));
  const DType state = p.has_past ? c.inputs[3].dtype : c.inputs[0].dtype;
  return Descs{{c.inputs[0].dtype, {p.b, p.t, p.q_heads * p.dv}}, {state, {p.b, p.kv_heads, p.dk, p.dv}}};
}

// Per token and key/value head: the state's update (2 to 6 operations per state element);
// per query head, its read (2 per state element).
double f_linear_attention(const OpContext& c) {
  auto p = linear_attention_params(c);
  if (!p.ok()) return 0;
  const double cells = static_cast<double>(p->dk * p->dv), tokens = static_cast<double>(p->b * p->t);
  const double update = 2 + (p->gated() ? 1 : 0) + (p->delta() ? 3 : 0);
  return tokens * cells * (update * static_cast<double>(p->kv_heads) + 2 * static_cast<double>(p->q_heads));
}

Expected<Descs> infer_causal_conv(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(all_float(c));
  MOSAIC_ASSIGN_OR_RETURN(CausalConvParams p, causal_conv_params(c));
  return Descs{{c.inputs[0].dtype, {p.b, p.c, p.l}}, {c.inputs[0].dtype, {p.b, p.c, p.k - 1}}};
}

double f_causal_conv(const OpContext& c) {
  auto p = causal_conv_params(c);
  if (!p.ok()) return 0;
  return static_cast<double>(p->b * p->c * p->l) * (2.0 * static_cast<double>(p->k) + (p->silu ? 4 : 0));
}

}  // namespace

Expected<LinearAttentionParams> linear_attention_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  auto bad = [&](const std::string& why) { return Status::invalid(n.label() + ": " + why); };
  if (!n.has_attr("q_num_heads") || !n.has_attr("kv_num_heads")) return bad("q_num_heads and kv_num_heads are required");
  LinearAttentionParams p;
  p.q_heads = n.attr_int("q_num_heads", 0);
  p.kv_heads = n.attr_int("kv_num_heads", 0);
  if (p.q_heads < 1 || p.kv_heads < 1 || p.q_heads % p.kv_heads != 0)
    return bad("q_num_heads " + std::to_string(p.q_heads) + " must be a positive multiple of kv_num_heads " +
               std::to_string(p.kv_heads));
  const std::string rule = n.attr_string("update_rule", "gated_delta");
  if (rule == "linear") p.rule = LinearUpdate::kLinear;
  else if (rule == "gated") p.rule = LinearUpdate::kGated;
  else if (rule == "delta") p.rule = LinearUpdate::kDelta;
  else if (rule == "gated_delta") p.rule = LinearUpdate::kGatedDelta;
  else return bad("update_rule '" + rule + "' (linear, gated, delta, gated_delta)");
  const Shape &q = ctx.inputs[0].shape, &k = ctx.inputs[1].shape, &v = ctx.inputs[2].shape;
  if (q.size() != 3 || k.size() != 3 || v.size() != 3 || k[0] != q[0] || v[0] != q[0] || k[1] != q[1] || v[1] != q[1])
    return bad("query " + shape_str(q) + ", key " + shape_str(k) + " and value " + shape_str(v) +
               " must be [B, T, heads * d] of one B and T");
  p.b = q[0], p.t = q[1];
  if (q[2] % p.q_heads != 0 || v[2] % p.kv_heads != 0 || k[2] != p.kv_heads * (q[2] / p.q_heads))
    return bad("query's " + std::to_string(q[2]) + " must be q_num_heads x d_k, key's " + std::to_string(k[2]) +
               " kv_num_heads x d_k and value's " + std::to_string(v[2]) + " kv_num_heads x d_v");
  p.dk = q[2] / p.q_heads, p.dv = v[2] / p.kv_heads;
  if (p.dk == 0 || p.dv == 0) return bad("d_k and d_v must be at least 1");
  p.has_past = ctx.has_input(3);
  if (p.has_past && ctx.inputs[3].shape != Shape{p.b, p.kv_heads, p.dk, p.dv})
    return bad("past_state " + shape_str(ctx.inputs[3].shape) + " must be " + shape_str(Shape{p.b, p.kv_heads, p.dk, p.dv}));
  if (ctx.has_input(4) != p.gated())
    return bad("update_rule '" + rule + "' " + (p.gated() ? "needs" : "takes no") + " decay");
  if (ctx.has_input(5) != p.delta())
    return bad("update_rule '" + rule + "' " + (p.delta() ? "needs" : "takes no") + " beta");
  if (p.gated()) {
    const Shape& g = ctx.inputs[4].shape;
    p.decay_per_key = g.size() == 3 && g[2] == p.kv_heads * p.dk && p.dk != 1;
    if (g.size() != 3 || g[0] != p.b || g[1] != p.t || (g[2] != p.kv_heads && g[2] != p.kv_heads * p.dk))
      return bad("decay " + shape_str(g) + " must be [B, T, kv_num_heads] or [B, T, kv_num_heads x d_k]");
  }
  if (p.delta()) {
    const Shape& be = ctx.inputs[5].shape;
    if (be.size() != 3 || be[0] != p.b || be[1] != p.t || (be[2] != p.kv_heads && be[2] != 1))
      return bad("beta " + shape_str(be) + " must be [B, T, kv_num_heads] or [B, T, 1]");
    p.beta_heads = be[2];
  }
  // The state and the work grow as d_k x d_v, a product of two input extents: a few MB of
  // input could ask for terabytes of state or hours of loop. Refused past 2^40 of either.
  const double cells = static_cast<double>(p.b) * static_cast<double>(p.kv_heads) * static_cast<double>(p.dk) *
                       static_cast<double>(p.dv);
  const double work = cells / static_cast<double>(p.kv_heads) * static_cast<double>(p.t) *
                      static_cast<double>(p.q_heads + p.kv_heads);
  if (cells * 8 > 1099511627776.0 || work > 1099511627776.0)
    return bad("a state of " + shape_str(Shape{p.b, p.kv_heads, p.dk, p.dv}) + " over " + std::to_string(p.t) +
               " tokens is more than 2^40 bytes of state or steps of recurrence");
  const float scale = n.attr_float("scale", 0.f);
  if (!std::isfinite(scale)) return bad("scale must be finite");
  p.scale = scale == 0.f ? 1.0 / std::sqrt(static_cast<double>(p.dk)) : static_cast<double>(scale);
  return p;
}

Expected<CausalConvParams> causal_conv_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &w = ctx.inputs[1].shape;
  if (x.size() != 3 || w.size() != 3 || w[0] != x[1] || w[1] != 1 || w[2] < 1)
    return Status::invalid(n.label() + ": input " + shape_str(x) + " and weight " + shape_str(w) +
                           " must be [B, C, L] and [C, 1, k] with k at least 1");
  CausalConvParams p;
  p.b = x[0], p.c = x[1], p.l = x[2], p.k = w[2];
  p.has_bias = ctx.has_input(2);
  if (p.has_bias && ctx.inputs[2].shape != Shape{p.c})
    return Status::invalid(n.label() + ": bias must be [" + std::to_string(p.c) + "], got " + shape_str(ctx.inputs[2].shape));
  p.has_past = ctx.has_input(3);
  if (p.has_past && ctx.inputs[3].shape != Shape{p.b, p.c, p.k - 1})
    return Status::invalid(n.label() + ": past_state " + shape_str(ctx.inputs[3].shape) + " must be " +
                           shape_str(Shape{p.b, p.c, p.k - 1}) + " (the last k - 1 positions)");
  if (static_cast<double>(p.b * p.c * p.l) * static_cast<double>(p.k) > 1099511627776.0)
    return Status::invalid(n.label() + ": " + shape_str(x) + " convolved with " + std::to_string(p.k) +
                           " taps is more than 2^40 multiply-adds");
  const std::string act = n.attr_string("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    return Status::invalid(n.label() + ": activation '" + act + "' (none, silu, swish)");
  p.silu = act != "none";
  return p;
}

void add_linear_attention_schemas(std::map<std::string, OpSchema>& t) {
  OpSchema& a = add_schema(t, "LinearAttention", 3, 6, infer_linear_attention, f_linear_attention,
                           "recurrent linear attention (linear, gated, delta, gated_delta state updates; GQA)");
  a.min_outputs = 1;
  a.max_outputs = 2;
  a.backward_flops = nullptr;
  OpSchema& c = add_schema(t, "CausalConvWithState", 2, 4, infer_causal_conv, f_causal_conv,
                           "depthwise causal 1-D convolution continuing a carried state (optional bias, SiLU)");
  c.min_outputs = 1;
  c.max_outputs = 2;
  c.backward_flops = nullptr;
}

}  // namespace mosaic
