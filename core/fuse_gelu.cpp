// GELU as PyTorch's exporter writes it (opsets below 20 have no Gelu), recognised as one
// Gelu node (core/fuse.hpp):
//   erf form:  0.5 * x * (1 + Erf(x / sqrt(2)))        (x * 0.7071... for the division too)
//   tanh form: 0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
//              with x^3 as Mul(x, Mul(x, x)) (torch.nn.functional.gelu) or Pow(x, 3)
// and the three Muls by x, by 0.5 and by (1 + ...) in any order and grouping. Every
// intermediate value must have one consumer and not be a graph output; constants must
// match to float precision.
// SiLU as x * Sigmoid(x) (either operand order), recognised as one Swish node (alpha
// 1; operators/eltwise.hpp), which the activation fusion then folds into a Conv or Gemm.
#include <cmath>

#include "core/fuse.hpp"
#include "core/fuse_match.hpp"

namespace mosaic {
namespace {

bool near(std::optional<double> v, double want) {
  return v && std::abs(*v - want) <= 1e-6 * std::abs(want);
}

/// y = 0.5 * x * a for the value a (= 1 + Erf/Tanh(...)): the Mul nodes that form y, in
/// any grouping, and y itself; empty when the product is not of that form.
struct Product {
  std::vector<const Node*> muls;
  std::string y;
};

Product half_x_times(const fuse::Matcher& M, const std::string& a, const std::string& x) {
  const Node* m1 = M.sole_consumer(a, "Mul");
  if (!m1) return {};
  const std::string o = fuse::Matcher::other(*m1, a);
  if (o == x) {  // (x * a) * 0.5
    const Node* m2 = M.sole_consumer(m1->outputs[0], "Mul");
    if (m2 && near(M.scalar(fuse::Matcher::other(*m2, m1->outputs[0])), 0.5)) return {{m1, m2}, m2->outputs[0]};
    return {};
  }
  if (near(M.scalar(o), 0.5)) {  // x * (a * 0.5)
    const Node* m2 = M.sole_consumer(m1->outputs[0], "Mul");
    if (m2 && fuse::Matcher::other(*m2, m1->outputs[0]) == x) return {{m1, m2}, m2->outputs[0]};
    return {};
  }
  const Node* h = M.made_by(o, "Mul");  // (x * 0.5) * a
  if (h && M.once(o) && fuse::Matcher::other(*h, x) != "" && near(M.scalar(fuse::Matcher::other(*h, x)), 0.5))
    return {{h, m1}, m1->outputs[0]};
  return {};
}

/// 1 + t for the value t: the Add and its output.
const Node* plus_one(const fuse::Matcher& M, const std::string& t) {
  const Node* add = M.sole_consumer(t, "Add");
  return add && near(M.scalar(fuse::Matcher::other(*add, t)), 1.0) ? add : nullptr;
}

/// The erf form's argument u = x / sqrt(2) or x * (1 / sqrt(2)): x and the node.
const Node* scaled_by_inv_sqrt2(const fuse::Matcher& M, const std::string& u, std::string* x) {
  if (!M.once(u)) return nullptr;
  if (const Node* d = M.made_by(u, "Div"); d && d->inputs.size() == 2 && near(M.scalar(d->inputs[1]), std::sqrt(2.0))) {
    *x = d->inputs[0];
    return d;
  }
  if (const Node* m = M.made_by(u, "Mul"); m && m->inputs.size() == 2) {
    for (int k = 0; k < 2; ++k)
      if (near(M.scalar(m->inputs[k]), 1.0 / std::sqrt(2.0))) {
        *x = m->inputs[1 - k];
        return m;
      }
  }
  return nullptr;
}

/// The tanh form's argument: sqrt(2/pi) * (x + 0.044715 * x^3). Appends its nodes.
bool tanh_argument(const fuse::Matcher& M, const std::string& u, std::string* x, std::vector<const Node*>* parts) {
  const double kC = std::sqrt(2.0 / M_PI);
  const Node* outer = M.once(u) ? M.made_by(u, "Mul") : nullptr;
  if (!outer || outer->inputs.size() != 2) return false;
  const int ck = near(M.scalar(outer->inputs[0]), kC) ? 0 : near(M.scalar(outer->inputs[1]), kC) ? 1 : -1;
  if (ck < 0) return false;
  const std::string s = outer->inputs[1 - ck];
  const Node* add = M.once(s) ? M.made_by(s, "Add") : nullptr;
  if (!add || add->inputs.size() != 2) return false;
  for (int k = 0; k < 2; ++k) {  // x + c3, c3 = 0.044715 * x^3
    const std::string cand_x = add->inputs[k], c3 = add->inputs[1 - k];
    const Node* m = M.once(c3) ? M.made_by(c3, "Mul") : nullptr;
    if (!m || m->inputs.size() != 2) continue;
    const int ak = near(M.scalar(m->inputs[0]), 0.044715) ? 0 : near(M.scalar(m->inputs[1]), 0.044715) ? 1 : -1;
    if (ak < 0) continue;
    const std::string cube = m->inputs[1 - ak];
    if (!M.once(cube)) continue;
    std::vector<const Node*> cube_nodes;
    if (const Node* p = M.made_by(cube, "Pow"); p && p->inputs[0] == cand_x && near(M.scalar(p->inputs[1]), 3.0)) {
      cube_nodes = {p};
    } else if (const Node* m3 = M.made_by(cube, "Mul"); m3 && m3->inputs.size() == 2) {
      const std::string sq = fuse::Matcher::other(*m3, cand_x);  // x * (x * x)
      const Node* m2 = sq.empty() || !M.once(sq) ? nullptr : M.made_by(sq, "Mul");
      if (m2 && m2->inputs[0] == cand_x && m2->inputs[1] == cand_x) cube_nodes = {m2, m3};
    }
    if (cube_nodes.empty()) continue;
    *x = cand_x;
    parts->insert(parts->end(), cube_nodes.begin(), cube_nodes.end());
    parts->insert(parts->end(), {m, add, outer});
    return true;
  }
  return false;
}

}  // namespace

void fuse_gelus(Graph& g, FuseReport& report) {
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& f = g.nodes[i];
      const bool erf = f.op_key() == "Erf";
      if ((!erf && f.op_key() != "Tanh") || f.inputs.size() != 1) continue;
      std::string x;
      std::vector<const Node*> parts;
      if (erf) {
        const Node* scale = scaled_by_inv_sqrt2(M, f.inputs[0], &x);
        if (!scale) continue;
        parts.push_back(scale);
      } else if (!tanh_argument(M, f.inputs[0], &x, &parts)) {
        continue;
      }
      parts.push_back(&f);
      const Node* one = plus_one(M, f.outputs[0]);
      if (!one) continue;
      parts.push_back(one);
      const Product p = half_x_times(M, one->outputs[0], x);
      if (p.y.empty()) continue;
      parts.insert(parts.end(), p.muls.begin(), p.muls.end());
      Node gelu;
      gelu.op_type = "Gelu";
      for (const Node* n : parts) gelu.name += (gelu.name.empty() ? "" : "+") + n->name;
      gelu.inputs = {x};
      gelu.outputs = {p.y};
      gelu.attrs["approximate"] = Attribute::of_string(erf ? "none" : "tanh");
      fuse::replace_nodes(g, parts, std::move(gelu), report);
      changed = true;
    }
  }
}

void fuse_swishes(Graph& g, const std::function<bool(const Node&)>& accept, FuseReport& report) {
  if (!accept) return;
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& sig = g.nodes[i];
      if (sig.op_key() != "Sigmoid" || sig.inputs.size() != 1) continue;
      const std::string& x = sig.inputs[0];
      const Node* mul = M.sole_consumer(sig.outputs[0], "Mul");
      if (!mul || fuse::Matcher::other(*mul, sig.outputs[0]) != x) continue;
      if (!g.value_descs.count(x) || g.value_descs.at(x).dtype != DType::kF32) continue;
      Node swish;
      swish.op_type = "Swish";  // ONNX's (opset 24), alpha 1; read at its first version at any opset
      swish.name = sig.name + "+" + mul->name;
      swish.inputs = {x};
      swish.outputs = {mul->outputs[0]};
      if (!accept(swish)) continue;
      fuse::replace_nodes(g, {&sig, mul}, std::move(swish), report);
      changed = true;
    }
  }
}

}  // namespace mosaic
