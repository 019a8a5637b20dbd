// Scaled dot-product attention as PyTorch exports it, recognised as one FusedAttention node
// (operators/attention.hpp) where FuseOptions::attention accepts it:
//   S = MatMul(Q, Kt); [S = Div(S, c) | Mul(S, c) | Mul(c, S)]; [S = Add(S, mask) | Add(mask, S)];
//   P = Softmax(S, last axis); O = MatMul(P, V)
// with c a float scalar constant. nn.MultiheadAttention scales Q before the MatMul: that
// Div stays a node of its own and the fused node has scale 1. Every intermediate value must
// have one consumer and not be a graph output; Q, Kt and V must share their leading axes.
#include "core/fuse.hpp"
#include "core/fuse_match.hpp"
#include "operators/attention.hpp"
#include "operators/op_context.hpp"

namespace mosaic {
namespace {

/// Softmax over the last axis of its input.
bool softmax_last_axis(const Graph& g, const Node& f) {
  const TensorDesc* x = fuse::desc_of(g, f.inputs[0]);
  if (!x || x->shape.size() < 2) return false;
  const int64_t r = static_cast<int64_t>(x->shape.size());
  int64_t axis = f.attr_int("axis", g.opset < 13 ? 1 : -1);
  if (axis < 0) axis += r;
  return axis == r - 1;
}

struct Match {
  std::vector<const Node*> parts;  ///< in graph order of the chain: MatMul, scale, add, Softmax, MatMul
  std::string q, kt, v, mask;
  double scale = 1;
  bool divide = false;
};

/// The scores up to an optional scalar scale: [Div(S, c) | Mul(S, c) | Mul(c, S)] of
/// S = MatMul(Q, Kt), or S itself. Prepends the nodes to m->parts.
bool scaled_scores(const fuse::Matcher& M, std::string s, Match* m) {
  if (const Node* div = M.made_by(s, "Div"); div && div->inputs.size() == 2) {
    auto c = M.scalar(div->inputs[1]);
    if (!c || !M.once(div->inputs[0])) return false;
    m->scale = *c;
    m->divide = true;
    s = div->inputs[0];
    m->parts.insert(m->parts.begin(), div);
  } else if (const Node* mul = M.made_by(s, "Mul"); mul && mul->inputs.size() == 2) {
    const int ck = M.scalar(mul->inputs[0]) ? 0 : M.scalar(mul->inputs[1]) ? 1 : -1;
    if (ck < 0 || !M.once(mul->inputs[1 - ck])) return false;
    m->scale = *M.scalar(mul->inputs[ck]);
    s = mul->inputs[1 - ck];
    m->parts.insert(m->parts.begin(), mul);
  }
  const Node* qk = M.made_by(s, "MatMul");
  if (!qk || qk->inputs.size() != 2) return false;
  m->parts.insert(m->parts.begin(), qk);
  m->q = qk->inputs[0];
  m->kt = qk->inputs[1];
  return true;
}

/// The chain ending in Softmax `f`, or false.
bool match_at(const fuse::Matcher& M, const Graph& g, const Node& f, Match* m) {
  if (f.inputs.size() != 1 || !softmax_last_axis(g, f) || !M.once(f.inputs[0])) return false;
  const Node* pv = M.sole_consumer(f.outputs[0], "MatMul");
  if (!pv || pv->inputs.size() != 2 || pv->inputs[0] != f.outputs[0]) return false;
  const std::vector<const Node*> tail{&f, pv};
  m->v = pv->inputs[1];
  // An optional mask add: either operand may be the (scaled) scores, the other the mask
  // (a BERT mask is itself a Mul by -10000, so both orders are tried in full).
  if (const Node* add = M.made_by(f.inputs[0], "Add"); add && add->inputs.size() == 2) {
    for (int k = 0; k < 2; ++k) {
      Match t = *m;
      t.parts = tail;
      t.parts.insert(t.parts.begin(), add);
      if (!M.once(add->inputs[k]) || !scaled_scores(M, add->inputs[k], &t)) continue;
      t.mask = add->inputs[1 - k];
      *m = t;
      return true;
    }
    return false;
  }
  m->parts = tail;
  return scaled_scores(M, f.inputs[0], m);
}

}  // namespace

std::set<std::string> attention_scores(const Graph& g) {
  std::set<std::string> scores;
  const fuse::Matcher M(g);
  for (const Node& f : g.nodes) {
    Match m;
    if (f.op_key() != "Softmax" || !match_at(M, g, f, &m)) continue;
    for (size_t i = 0; i + 1 < m.parts.size(); ++i) scores.insert(m.parts[i]->outputs[0]);
  }
  return scores;
}

void fuse_attention(Graph& g, const std::function<bool(const Node&)>& accept, FuseReport& report) {
  if (!accept) return;
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& f = g.nodes[i];
      Match m;
      if (f.op_key() != "Softmax" || !match_at(M, g, f, &m)) continue;
      Node fused;
      fused.op_type = kAttentionOp;
      fused.domain = kAttentionDomain;
      for (const Node* n : m.parts) fused.name += (fused.name.empty() ? "" : "+") + n->name;
      fused.inputs = {m.q, m.kt, m.v};
      if (!m.mask.empty()) fused.inputs.push_back(m.mask);
      fused.outputs = {m.parts.back()->outputs[0]};
      fused.attrs["scale"] = Attribute::of_float(static_cast<float>(m.scale));
      fused.attrs["divide"] = Attribute::of_int(m.divide ? 1 : 0);
      // The node must be well formed (shapes chain, leading axes shared, float) and wanted.
      OpContext ctx;
      ctx.node = &fused;
      ctx.opset = g.opset;
      bool known = true;
      for (const auto& in : fused.inputs) {
        const TensorDesc* d = fuse::desc_of(g, in);
        auto c = g.initializers.find(in);
        if (!d && c == g.initializers.end()) known = false;
        ctx.inputs.push_back(d ? *d : c != g.initializers.end() ? c->second.desc() : TensorDesc{});
        ctx.input_present.push_back(true);
        ctx.constants.push_back(c != g.initializers.end() ? &c->second : nullptr);
      }
      if (!known || !attention_params(ctx).ok() || !accept(fused)) continue;
      fuse::replace_nodes(g, m.parts, std::move(fused), report);
      changed = true;
    }
  }
}

}  // namespace mosaic
