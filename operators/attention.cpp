#include "operators/attention.hpp"

#include <cmath>

#include "operators/params.hpp"

namespace mosaic {

Expected<AttentionParams> attention_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32)
      return Status::unsupported(n.label() + ": input " + std::to_string(i) + " has dtype " +
                                 dtype_name(ctx.inputs[i].dtype) + "; FusedAttention computes in float32");
  const Shape &q = ctx.inputs[0].shape, &kt = ctx.inputs[1].shape, &v = ctx.inputs[2].shape;
  const size_t r = q.size();
  if (r < 2 || kt.size() != r || v.size() != r)
    return Status::invalid(n.label() + ": Q, Kt and V must have the same rank (>= 2), got " + shape_str(q) + ", " +
                           shape_str(kt) + ", " + shape_str(v));
  AttentionParams p;
  for (size_t i = 0; i + 2 < r; ++i) {
    if (kt[i] != q[i] || v[i] != q[i])
      return Status::invalid(n.label() + ": Q, Kt and V must share their leading axes, got " + shape_str(q) + ", " +
                             shape_str(kt) + ", " + shape_str(v));
    p.batch *= q[i];
  }
  p.tq = q[r - 2];
  p.d = q[r - 1];
  p.tk = kt[r - 1];
  p.dv = v[r - 1];
  if (kt[r - 2] != p.d || v[r - 2] != p.tk)
    return Status::invalid(n.label() + ": Q " + shape_str(q) + ", Kt " + shape_str(kt) + " and V " + shape_str(v) +
                           " do not chain as Q Kt V");
  p.scale = n.attr_float("scale", 1.f);
  p.divide = n.attr_int("divide", 0) != 0;
  if (!std::isfinite(p.scale) || p.scale == 0.f)
    return Status::invalid(n.label() + ": scale must be finite and non-zero");
  p.out = q;
  p.out[r - 1] = p.dv;
  p.has_mask = ctx.has_input(3);
  if (p.has_mask) {
    Shape s = q;
    s[r - 1] = p.tk;
    const Shape& m = ctx.inputs[3].shape;
    auto b = broadcast_shapes(m, s);
    if (!b.ok() || *b != s)
      return Status::invalid(n.label() + ": mask " + shape_str(m) + " does not broadcast to the scores " + shape_str(s));
    // Strides of the mask viewed at the scores' rank, 0 on broadcast axes.
    std::vector<int64_t> st(r, 0);
    int64_t acc = 1;
    for (size_t k = m.size(); k-- > 0;) {
      st[k + r - m.size()] = m[k] == 1 ? 0 : acc;
      acc *= m[k];
    }
    p.mask_row = st[r - 2];
    p.mask_col = st[r - 1];
    p.mask_offset.assign(static_cast<size_t>(p.batch), 0);
    std::vector<int64_t> idx(r > 2 ? r - 2 : 0, 0);
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      int64_t off = 0;
      for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * st[k];
      p.mask_offset[static_cast<size_t>(bi)] = off;
      for (size_t k = idx.size(); k-- > 0;) {
        if (++idx[k] < q[k]) break;
        idx[k] = 0;
      }
    }
  }
  return p;
}

Expected<std::vector<TensorDesc>> infer_attention(const OpContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(AttentionParams p, attention_params(ctx));
  return std::vector<TensorDesc>{{DType::kF32, p.out}};
}

double attention_flops(const OpContext& ctx) {
  auto p = attention_params(ctx);
  if (!p.ok()) return 0;
  const double scores = static_cast<double>(p->batch) * p->tq * p->tk;
  // Q Kt, the scale, the mask add, Softmax (4 per element, as its schema counts), P V.
  return scores * (2.0 * p->d + 1 + (p->has_mask ? 1 : 0) + 4 + 2.0 * p->dv);
}

}  // namespace mosaic
