// A dynamically quantised model's products as one node each (issue 52). ONNX Runtime's
// dynamic quantiser writes every MatMul by constant weights as
//   a_q, a_scale, a_zp = DynamicQuantizeLinear(a)       (shared by the products that read a)
//   acc = MatMulInteger(a_q, B_q, a_zp, b_zp)            int32
//   y = Mul(Cast(acc, to=float), Mul(a_scale, b_scale))  [+ Add(y, bias)]
// and ONNX Runtime runs the last three (or four) as one com.microsoft MatMulIntegerToFloat.
// So does this pass, where FuseOptions::integer accepts the fused node (onednn: one int8
// matmul with the scales and the bias in its epilogue, instead of an int32 tensor written,
// converted, scaled and biased in three more passes). The fused node's arithmetic is the
// chain's: the int32 sum converted to float32, times the float32 product a_scale *
// b_scale[n], plus bias[n], each rounding once as before (operators/ms_quantize.hpp).
//
// A scale already folded into one constant (a model whose A scale was static) is taken as
// b_scale with an a_scale of 1 (the product is the same float). Inference plans only.
#include "core/fuse.hpp"
#include "core/fuse_match.hpp"
#include "operators/ms_quantize.hpp"

namespace mosaic {
namespace {

bool is_f32(const TensorDesc* d) { return d && d->dtype == DType::kF32; }

/// The scales of a MatMulIntegerToFloat from the Mul's other operand `s` (n columns):
/// a_scale and b_scale, or false where `s` is not a product of a per-tensor scale and one per
/// tensor or per column. Where `s` is itself the folded constant, a_scale is left empty: the
/// caller makes it a constant 1.
bool scales_of(const Graph& g, const fuse::Matcher& M, const std::string& s, int64_t n, std::string* a_scale,
               std::string* b_scale, const Node** product) {
  auto per_column = [&](const std::string& v) {
    const TensorDesc* d = fuse::desc_of(g, v);
    return is_f32(d) && (d->numel() == 1 || d->shape == Shape{n});
  };
  auto scalar = [&](const std::string& v) {
    const TensorDesc* d = fuse::desc_of(g, v);
    return is_f32(d) && d->numel() == 1 && d->shape.size() <= 1;
  };
  if (const Node* sm = M.made_by(s, "Mul"); sm && sm->inputs.size() == 2) {
    const std::string &p = sm->inputs[0], &q = sm->inputs[1];
    if (scalar(p) && per_column(q)) *a_scale = p, *b_scale = q;
    else if (scalar(q) && per_column(p)) *a_scale = q, *b_scale = p;
    else return false;
    *product = sm;
    return true;
  }
  if (!g.initializers.count(s) || !per_column(s)) return false;
  a_scale->clear(), *b_scale = s;
  *product = nullptr;
  return true;
}

}  // namespace

void fuse_dynamic_products(Graph& g, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report) {
  if (!accept) return;
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& mm = g.nodes[i];
      if (mm.op_key() != "MatMulInteger" || mm.inputs.size() < 2 || mm.outputs.size() != 1) continue;
      const Node* cast = M.sole_consumer(mm.outputs[0], "Cast");
      if (!cast || cast->attr_int("to", 0) != 1 || cast->outputs.size() != 1) continue;  // 1: FLOAT
      const Node* mul = M.sole_consumer(cast->outputs[0], "Mul");
      const TensorDesc* acc = fuse::desc_of(g, mm.outputs[0]);
      const TensorDesc* scaled = mul ? fuse::desc_of(g, mul->outputs[0]) : nullptr;
      if (!mul || mul->outputs.size() != 1 || !acc || !scaled || acc->shape.empty() || scaled->shape != acc->shape) continue;
      const int64_t n = acc->shape.back();
      const std::string s = fuse::Matcher::other(*mul, cast->outputs[0]);
      std::string a_scale, b_scale;
      const Node* product = nullptr;
      if (s.empty() || !scales_of(g, M, s, n, &a_scale, &b_scale, &product)) continue;
      // A bias after it: Add of a constant float32 [n].
      const Node* add = M.sole_consumer(mul->outputs[0], "Add");
      std::string bias;
      if (add && add->outputs.size() == 1) {
        bias = fuse::Matcher::other(*add, mul->outputs[0]);
        const TensorDesc* bd = fuse::desc_of(g, bias);
        const TensorDesc* out = fuse::desc_of(g, add->outputs[0]);
        if (!g.initializers.count(bias) || !is_f32(bd) || bd->shape != Shape{n} || !out || out->shape != acc->shape)
          bias.clear();
      }
      if (bias.empty()) add = nullptr;
      Node fused;
      fused.op_type = "MatMulIntegerToFloat";
      fused.domain = kMicrosoftDomain;
      fused.name = mm.name + "+" + (add ? add : mul)->name;
      auto input = [&](size_t k) { return k < mm.inputs.size() ? mm.inputs[k] : std::string(); };
      fused.inputs = {mm.inputs[0], mm.inputs[1], a_scale, b_scale, input(2), input(3)};
      if (add) fused.inputs.push_back(bias);
      while (!fused.inputs.empty() && fused.inputs.back().empty()) fused.inputs.pop_back();
      fused.outputs = {(add ? add : mul)->outputs[0]};
      std::vector<std::string> added;
      if (a_scale.empty()) {  // the folded scale: a_scale 1
        added.push_back(fuse::add_constant(g, s + ".one", Tensor::from_f32({}, {1.f})));
        fused.inputs[2] = added.back();
      }
      if (!accept(g, fused)) {
        fuse::drop_constants(g, added);
        continue;
      }
      std::vector<const Node*> parts{&mm, cast, mul};
      if (product && M.once(s)) parts.push_back(product);
      if (add) parts.push_back(add);
      fuse::replace_nodes(g, parts, std::move(fused), report);
      changed = true;
    }
  }
}

}  // namespace mosaic
