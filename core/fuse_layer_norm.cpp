// The normalisations PyTorch exports as decompositions, recognised as one node each
// (core/fuse.hpp). Every intermediate value must have no other consumer and not be a graph
// output.
// LayerNorm below opset 17, as one LayerNormalization:
//   m = ReduceMean(x, trailing axes); d = Sub(x, m); v = ReduceMean(Pow(d, 2), same axes);
//   y = Div(d, Sqrt(Add(v, eps)))  [then Mul(y, Scale)  [then Add(., B)]]
// with Scale and B constants of one value per normalised element (d: exactly the Pow and
// the Div read it).
// RMSNorm (Llama, Mistral, Qwen2, T5; both exporters), as one RMSNormalization (opset 23):
//   v = ReduceMean(Pow(x, 2), trailing axes); r = Sqrt(Add(v, eps));
//   y = Div(x, r) or Mul(x, Reciprocal(r)) or Mul(x, Div(1, r))
//   [then a Cast to float32 (PyTorch's .to(input_dtype)), then Mul(y, Scale)]
// for float32 x, Scale a constant of the normalised shape or one value.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "core/fuse.hpp"
#include "core/fuse_match.hpp"
#include "operators/onnx_versions.hpp"
#include "operators/op_context.hpp"
#include "operators/reduce.hpp"

namespace mosaic {
namespace {

/// The first reduced axis of a ReduceMean over x's trailing axes (keepdims), or nullopt.
std::optional<int64_t> trailing_mean_axis(const Graph& g, const Node& n) {
  if (n.op_key() != "ReduceMean" || n.inputs.empty() || !g.value_descs.count(n.inputs[0])) return std::nullopt;
  if (n.attr_int("keepdims", 1) != 1) return std::nullopt;
  OpContext ctx;
  ctx.node = &n;
  ctx.opset = g.opset;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    auto c = i > 0 ? g.initializers.find(n.inputs[i]) : g.initializers.end();
    ctx.inputs.push_back(i == 0 ? g.value_descs.at(n.inputs[0]) : c != g.initializers.end() ? c->second.desc() : TensorDesc{});
    ctx.input_present.push_back(!n.inputs[i].empty());
    ctx.constants.push_back(c != g.initializers.end() ? &c->second : nullptr);
  }
  auto p = reduce_params(ctx);
  if (!p.ok() || p->axes.empty()) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(p->in.size());
  for (size_t k = 0; k < p->axes.size(); ++k)
    if (p->axes[k] != rank - static_cast<int64_t>(p->axes.size()) + static_cast<int64_t>(k)) return std::nullopt;
  return p->axes.front();
}

/// Whether `c` is a constant float32 scale RMSNormalization takes for x's axes from `axis`:
/// the normalised shape (leading 1s allowed) or one value.
bool rms_scale(const Graph& g, const std::string& c, const Shape& xs, int64_t axis) {
  auto it = g.initializers.find(c);
  if (it == g.initializers.end() || it->second.dtype() != DType::kF32) return false;
  if (it->second.numel() == 1) return true;
  Shape s = it->second.shape();
  const Shape normalised(xs.begin() + axis, xs.end());
  while (s.size() > normalised.size() && s.front() == 1) s.erase(s.begin());
  return s == normalised;
}

}  // namespace

void fuse_rms_norms(Graph& g, const std::function<bool(const Node&)>& accept, FuseReport& report) {
  if (!accept) return;
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t vi = 0; vi < g.nodes.size() && !changed; ++vi) {
      const Node& var = g.nodes[vi];
      const std::optional<int64_t> axis = trailing_mean_axis(g, var);
      const Node* pow = axis ? M.made_by(var.inputs[0], "Pow") : nullptr;
      if (!pow || !M.once(var.inputs[0]) || M.scalar(pow->inputs[1]) != 2.0) continue;
      const std::string& x = pow->inputs[0];
      if (!g.value_descs.count(x) || g.value_descs.at(x).dtype != DType::kF32) continue;
      const Node* add = M.sole_consumer(var.outputs[0], "Add");
      const std::optional<double> eps = add ? M.scalar(fuse::Matcher::other(*add, var.outputs[0])) : std::nullopt;
      const Node* sqrt = eps && *eps >= 0 ? M.sole_consumer(add->outputs[0], "Sqrt") : nullptr;
      if (!sqrt) continue;
      const std::string& r = sqrt->outputs[0];
      std::vector<const Node*> parts{pow, &var, add, sqrt};
      std::string out;
      if (const Node* div = M.sole_consumer(r, "Div"); div && div->inputs[0] == x && div->inputs[1] == r) {
        parts.push_back(div);  // x / r
        out = div->outputs[0];
      } else {
        const Node* inv = M.sole_consumer(r, "Reciprocal");  // 1 / r, as Reciprocal or Div(1, r)
        if (!inv && div && div->inputs[1] == r && M.scalar(div->inputs[0]) == 1.0) inv = div;
        const Node* mul = inv ? M.sole_consumer(inv->outputs[0], "Mul") : nullptr;
        if (!mul || fuse::Matcher::other(*mul, inv->outputs[0]) != x) continue;
        parts.push_back(inv);
        parts.push_back(mul);
        out = mul->outputs[0];
      }
      if (const Node* cast = M.sole_consumer(out, "Cast");
          cast && cast->attr_int("to", 0) == onnx_code_of(DType::kF32)) {
        parts.push_back(cast);  // float32 to float32: nothing to do
        out = cast->outputs[0];
      }
      const Shape& xs = g.value_descs.at(x).shape;
      std::string scale;
      if (const Node* mul = M.sole_consumer(out, "Mul")) {
        const std::string other = fuse::Matcher::other(*mul, out);
        if (rms_scale(g, other, xs, *axis)) {
          parts.push_back(mul);
          out = mul->outputs[0];
          scale = other;
        }
      }
      Node rms;
      rms.op_type = "RMSNormalization";
      for (const Node* n : parts) rms.name += (rms.name.empty() ? "" : "+") + n->name;
      if (!accept(rms)) continue;
      if (scale.empty()) {  // no Mul: a scale of one
        scale = var.name + ".scale_one";
        g.initializers[scale] = Tensor::from_f32({1}, {1.f});
        g.constants.insert(scale);  // made up, not a parameter
        g.value_descs[scale] = g.initializers[scale].desc();
      }
      rms.inputs = {x, scale};
      rms.outputs = {out};
      rms.attrs["axis"] = Attribute::of_int(*axis);
      rms.attrs["epsilon"] = Attribute::of_float(static_cast<float>(*eps));
      fuse::replace_nodes(g, parts, std::move(rms), report);
      changed = true;
    }
  }
}

void fuse_layer_norms(Graph& g, FuseReport& report) {
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    auto made_by = [&](const std::string& v, const char* op) { return M.made_by(v, op); };
    auto once = [&](const std::string& v) { return M.once(v); };
    auto scalar = [&](const Graph&, const std::string& v) { return M.scalar(v); };
    for (size_t di = 0; di < g.nodes.size() && !changed; ++di) {
      const Node& div = g.nodes[di];
      if (div.op_key() != "Div" || div.inputs.size() != 2) continue;
      const std::string& d = div.inputs[0];
      const Node* sqrt = made_by(div.inputs[1], "Sqrt");
      const Node* add = sqrt && once(div.inputs[1]) ? made_by(sqrt->inputs[0], "Add") : nullptr;
      if (!add || !once(sqrt->inputs[0])) continue;
      const bool v_first = !g.initializers.count(add->inputs[0]);
      const std::string& v = add->inputs[v_first ? 0 : 1];
      const std::optional<double> eps = scalar(g, add->inputs[v_first ? 1 : 0]);
      const Node* var = eps && *eps >= 0 ? made_by(v, "ReduceMean") : nullptr;
      const Node* pow = var && once(v) ? made_by(var->inputs[0], "Pow") : nullptr;
      if (!pow || !once(var->inputs[0]) || pow->inputs[0] != d || scalar(g, pow->inputs[1]) != 2.0) continue;
      const Node* sub = made_by(d, "Sub");
      if (!sub || M.uses(d) != 2) continue;
      const Node* mean = made_by(sub->inputs[1], "ReduceMean");
      if (!mean || !once(sub->inputs[1]) || mean->inputs[0] != sub->inputs[0]) continue;
      const std::optional<int64_t> axis = trailing_mean_axis(g, *mean);
      if (!axis || trailing_mean_axis(g, *var) != axis) continue;
      const std::string& x = sub->inputs[0];
      const Shape& xs = g.value_descs.at(x).shape;
      int64_t inner = 1;
      for (size_t a = static_cast<size_t>(*axis); a < xs.size(); ++a) inner *= xs[a];
      // The affine part: Mul by a constant Scale, then Add a constant B, each optional.
      std::vector<const Node*> parts{mean, sub, pow, var, add, sqrt, &div};
      std::string out = div.outputs[0], scale, bias;
      auto constant_operand = [&](const Node& n, const std::string& from) -> std::string {
        if (n.inputs.size() != 2) return "";
        const std::string& other = n.inputs[0] == from ? n.inputs[1] : n.inputs[0];
        auto c = g.initializers.find(other);
        return c != g.initializers.end() && c->second.dtype() == DType::kF32 && c->second.numel() == inner ? other : "";
      };
      auto consumer = [&](const std::string& v, const char* op) { return M.sole_consumer(v, op); };
      if (const Node* mul = consumer(out, "Mul"); mul && !(scale = constant_operand(*mul, out)).empty()) {
        parts.push_back(mul);
        out = mul->outputs[0];
        if (const Node* b = consumer(out, "Add"); b && !(bias = constant_operand(*b, out)).empty()) {
          parts.push_back(b);
          out = b->outputs[0];
        }
      }
      if (scale.empty()) {  // no Mul: a Scale of ones
        scale = div.name + ".scale_ones";
        g.initializers[scale] = Tensor::from_f32({inner}, std::vector<float>(static_cast<size_t>(inner), 1.f));
        g.constants.insert(scale);  // made up, not a parameter: LayerNorm without elementwise_affine
        g.value_descs[scale] = g.initializers[scale].desc();
      }
      Node ln;
      ln.op_type = "LayerNormalization";
      for (const Node* n : parts) ln.name += (ln.name.empty() ? "" : "+") + n->name;
      ln.inputs = {x, scale};
      if (!bias.empty()) ln.inputs.push_back(bias);
      ln.outputs = {out};
      ln.attrs["axis"] = Attribute::of_int(*axis);
      ln.attrs["epsilon"] = Attribute::of_float(static_cast<float>(*eps));
      fuse::replace_nodes(g, parts, std::move(ln), report);
      changed = true;
    }
  }
}

}  // namespace mosaic
