// A Linear layer as exporters write it, recognised as one Gemm (ONNX Runtime's MatMul + Add
// fusion):
//   Y = MatMul(X, W); Z = Add(Y, b) | Add(b, Y)
// with W a float32 initializer [K, N] and b a float32 initializer [N] or [1, N] (the bias
// along Y's last axis, so Z has Y's shape). X of rank 2 becomes Gemm(X, W, b) -> Z. A higher
// rank (a transformer's [batch, sequence, K]) is a view either side of the product:
//   Reshape(X, [rows, K]) -> Gemm(., W, b) -> Reshape(., Z's shape)
// so that the bias is added in the product's epilogue instead of a pass of its own. Where Z's
// only reader is an activation the element-wise table marks fusable (a transformer's GELU),
// that activation moves before the second Reshape (element-wise ops commute with a view), and
// fuse_graph's activation rule then folds it into the Gemm as well.
//
// Exact: Gemm computes X W + b as MatMul and Add did, one product per row; every backend
// runs Gemm. The weights and bias stay the initializers they were (nothing is copied), so a
// plan that shares parameter buffers reads the same ones.
#include <algorithm>

#include "core/fuse.hpp"
#include "core/fuse_match.hpp"
#include "operators/eltwise.hpp"

namespace mosaic {
namespace {

/// A float32 initializer of shape [n] or [1, n].
bool bias_of(const Graph& g, const std::string& v, int64_t n) {
  auto it = g.initializers.find(v);
  if (it == g.initializers.end() || it->second.dtype() != DType::kF32) return false;
  const Shape& s = it->second.shape();
  return (s.size() == 1 && s[0] == n) || (s.size() == 2 && s[0] == 1 && s[1] == n);
}

/// The fusable activation (one input, or constant extra inputs) that alone reads `v`.
const Node* sole_activation(const Graph& g, const fuse::Matcher& M, const std::string& v) {
  if (!M.once(v)) return nullptr;
  for (const auto& n : g.nodes) {
    if (std::find(n.inputs.begin(), n.inputs.end(), v) == n.inputs.end()) continue;
    const auto op = unary_op_of(n.op_key());
    if (!op || !unary_info(*op).fusable || n.inputs[0] != v || n.outputs.size() != 1) return nullptr;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && !g.initializers.count(n.inputs[i])) return nullptr;
    return &n;
  }
  return nullptr;
}

/// A Reshape node `name`: `in` -> `out` with the shape as a new int64 initializer.
Node reshape(Graph& g, const std::string& name, const std::string& in, const std::string& out, const Shape& to) {
  const std::string shape = fuse::fresh_name(g, name + ".shape");
  g.initializers[shape] = Tensor::from_i64({static_cast<int64_t>(to.size())}, to);
  g.value_descs[shape] = g.initializers[shape].desc();
  g.constants.insert(shape);
  Node r;
  r.op_type = "Reshape";
  r.name = name;
  r.inputs = {in, shape};
  r.outputs = {out};
  return r;
}

}  // namespace

void fuse_linears(Graph& g, const std::function<bool(const Node&)>& accept, FuseReport& report) {
  if (!accept) return;
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& mm = g.nodes[i];
      if (mm.op_key() != "MatMul" || mm.inputs.size() != 2 || mm.outputs.size() != 1) continue;
      const TensorDesc *x = fuse::desc_of(g, mm.inputs[0]), *y = fuse::desc_of(g, mm.outputs[0]);
      auto w = g.initializers.find(mm.inputs[1]);
      if (!x || !y || w == g.initializers.end() || x->dtype != DType::kF32 || w->second.dtype() != DType::kF32 ||
          w->second.shape().size() != 2 || x->shape.size() < 2)
        continue;
      const int64_t k = w->second.shape()[0], n = w->second.shape()[1];
      Shape xw = x->shape;  // X's rows by W's columns: no broadcasting of a batch
      xw.back() = n;
      if (k < 1 || n < 1 || y->shape != xw) continue;
      const Node* add = M.sole_consumer(mm.outputs[0], "Add");
      const std::string b = add ? fuse::Matcher::other(*add, mm.outputs[0]) : "";
      if (!add || b.empty() || !bias_of(g, b, n) || fuse::desc_of(g, add->outputs[0]) == nullptr ||
          fuse::desc_of(g, add->outputs[0])->shape != y->shape)
        continue;
      Node gemm;
      gemm.op_type = "Gemm";
      gemm.name = mm.name + "+" + add->name;
      if (!accept(gemm)) continue;
      const Shape out_shape = y->shape;
      if (x->shape.size() == 2) {
        gemm.inputs = {mm.inputs[0], mm.inputs[1], b};
        gemm.outputs = {add->outputs[0]};
        fuse::replace_nodes(g, {&mm, add}, std::move(gemm), report);
        changed = true;
        continue;
      }
      // Rows of X in, rows of Z (or of the activation after it) out.
      const int64_t rows = shape_numel(out_shape) / n;
      const Node* act = sole_activation(g, M, add->outputs[0]);
      const std::string x2 = fuse::fresh_name(g, mm.inputs[0] + ".rows"), z2 = fuse::fresh_name(g, gemm.name + ".rows");
      Node in = reshape(g, mm.name + ".rows", mm.inputs[0], x2, {rows, k});
      g.value_descs[x2] = TensorDesc(DType::kF32, {rows, k});
      g.value_descs[z2] = TensorDesc(DType::kF32, {rows, n});
      gemm.inputs = {x2, mm.inputs[1], b};
      gemm.outputs = {z2};
      std::vector<Node> made;
      made.push_back(std::move(in));
      made.push_back(std::move(gemm));
      std::vector<const Node*> parts{&mm, add};
      if (act) {
        Node moved = *act;
        const std::string u2 = fuse::fresh_name(g, act->name + ".rows");
        g.value_descs[u2] = TensorDesc(DType::kF32, {rows, n});
        moved.inputs[0] = z2;
        moved.outputs[0] = u2;
        made.push_back(std::move(moved));
        made.push_back(reshape(g, act->name + ".unrows", u2, act->outputs[0], out_shape));
        parts.push_back(act);
      } else {
        made.push_back(reshape(g, add->name + ".unrows", z2, add->outputs[0], out_shape));
      }
      // The new nodes take the place of the last part; the parts' values go but the last.
      const std::string last = made.back().outputs[0];
      const TensorDesc kept = *fuse::desc_of(g, last);
      fuse::replace_nodes(g, parts, std::move(made[1]), report);
      g.value_descs[last] = kept;
      auto at = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& nd) { return nd.outputs[0] == z2; });
      at = g.nodes.insert(at, std::move(made[0])) + 2;
      for (size_t j = 2; j < made.size(); ++j) at = g.nodes.insert(at, std::move(made[j])) + 1;
      changed = true;
    }
  }
}

}  // namespace mosaic
