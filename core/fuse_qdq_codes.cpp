// A QDQ model's float stretches between its integer ops, as 8-bit codes (issue 52: "int8
// layouts kept between integer ops"). A quantiser writes what sits between two quantised
// convolutions as float arithmetic:
//   v = DequantizeLinear(x_q, s1, z1)  -> Relu -> Pad(0) -> MaxPool -> QuantizeLinear(s2, z2)
// which the backends ran as five passes over float tensors four times the codes' size. Every
// step there either maps each value on its own (DequantizeLinear, Relu, Clip, LeakyRelu with
// alpha >= 0, QuantizeLinear), and the composite of those is a function of the 256 codes of
// x_q, or moves values without looking at them (Pad, Reshape, Flatten), or takes a maximum
// (MaxPool). The composite f = Q2 . ops . DQ1 is monotone (a positive scale, monotone ops), so
// a maximum of codes is the code of the maximum, and the stretch becomes, exactly,
//   y_q = Pad(CodeLookup(x_q, T), c) -> MaxPool on codes
// with T[i] = f(the i-th code) and c the code a padded value ends as (Q2 of the ops after the
// Pad applied to its constant). Both tables are computed by the oracle's own kernels (the
// registry's naive backend folding a small graph), so the rewritten stretch gives the codes
// naive gives for the stretch as written, bit for bit.
//
// Only where FuseOptions::integer accepts every new node (the backend that will run it takes
// CodeLookup and the 8-bit Pad and MaxPool), in inference plans, after the integer products.
#include <algorithm>
#include <limits>
#include <map>
#include <functional>
#include <optional>
#include <set>

#include "core/fuse.hpp"
#include "core/fuse_match.hpp"
#include "core/prepare.hpp"
#include "operators/quantize.hpp"

namespace mosaic {
namespace {

bool is_byte(DType t) { return t == DType::kU8 || t == DType::kI8; }

/// A scalar initializer, or nullptr.
const Tensor* scalar_constant(const Graph& g, const std::string& v) {
  auto it = g.initializers.find(v);
  return it == g.initializers.end() || it->second.numel() != 1 ? nullptr : &it->second;
}

/// Every input after the first is absent or a constant.
bool constant_operands(const Graph& g, const Node& n) {
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (!n.inputs[i].empty() && !g.initializers.count(n.inputs[i])) return false;
  return true;
}

/// A per-tensor DequantizeLinear of run-time 8-bit codes into float32 (a positive finite scale,
/// a constant zero point of the codes' type), or a QuantizeLinear of float32 into 8-bit codes.
bool per_tensor_bytes(const Graph& g, const Node& n, DType codes) {
  if (n.inputs.size() < 2 || n.outputs.size() != 1 || n.attr_int("block_size", 0) != 0) return false;
  const Tensor* s = scalar_constant(g, n.inputs[1]);
  if (!s || s->dtype() != DType::kF32 || !(s->get(0) > 0) || !(s->get(0) < std::numeric_limits<float>::infinity()))
    return false;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor* z = scalar_constant(g, n.inputs[2]);
    if (!z || z->dtype() != codes) return false;
  }
  return true;
}

/// A step of the stretch: maps each value alone and monotonically (`pointwise`), or moves
/// values, or takes window maxima.
enum class Step { kNone, kPointwise, kMovement };

Step step_of(const Graph& g, const Node& n) {
  if (n.outputs.size() != 1 || n.inputs.empty() || !constant_operands(g, n)) return Step::kNone;
  const std::string op = n.op_key();
  if (op == "Relu" || op == "Clip") return Step::kPointwise;
  if (op == "LeakyRelu") return n.attr_float("alpha", 0.01f) >= 0 ? Step::kPointwise : Step::kNone;
  if (op == "Pad") return n.attr_string("mode", "constant") == "constant" ? Step::kMovement : Step::kNone;
  if (op == "MaxPool" || op == "Reshape" || op == "Flatten") return Step::kMovement;
  return Step::kNone;
}

/// The stretch from a DequantizeLinear: its steps in order and the QuantizeLinear that ends it.
struct Stretch {
  const Node* dq = nullptr;
  std::vector<const Node*> steps;
  const Node* q = nullptr;
  DType in = DType::kU8, out = DType::kU8;
};

/// The node that reads each value (the last one, where several do; M.once tells them apart).
std::map<std::string, const Node*> readers(const Graph& g) {
  std::map<std::string, const Node*> r;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) r[in] = &n;
  return r;
}

std::optional<Stretch> stretch_from(const Graph& g, const fuse::Matcher& M, const std::map<std::string, const Node*>& reader,
                                    const Node& dq) {
  if (dq.op_key() != "DequantizeLinear" || dq.inputs.empty() || g.initializers.count(dq.inputs[0])) return std::nullopt;
  const TensorDesc* x = fuse::desc_of(g, dq.inputs[0]);
  const TensorDesc* v = fuse::desc_of(g, dq.outputs.empty() ? "" : dq.outputs[0]);
  if (!x || !v || !is_byte(x->dtype) || v->dtype != DType::kF32 || !per_tensor_bytes(g, dq, x->dtype)) return std::nullopt;
  Stretch s;
  s.dq = &dq;
  s.in = x->dtype;
  std::string cur = dq.outputs[0];
  for (int hops = 0; hops < 16; ++hops) {
    if (!M.once(cur)) return std::nullopt;
    const auto it = reader.find(cur);
    const Node* next = it == reader.end() ? nullptr : it->second;
    if (!next || next->inputs[0] != cur) return std::nullopt;
    if (next->op_key() == "QuantizeLinear") {
      const TensorDesc* y = fuse::desc_of(g, next->outputs.empty() ? "" : next->outputs[0]);
      if (!y || !is_byte(y->dtype) || !per_tensor_bytes(g, *next, y->dtype)) return std::nullopt;
      s.q = next;
      s.out = y->dtype;
      return s;
    }
    if (step_of(g, *next) == Step::kNone) return std::nullopt;
    s.steps.push_back(next);
    cur = next->outputs[0];
  }
  return std::nullopt;
}

/// `value` (a float32 tensor of any shape) after `pointwise` (copies of the stretch's steps that
/// map values) and the quantisation `q`, computed by the oracle: a small graph folded on the
/// registry's naive backend. Empty where it does not fold.
Tensor through_the_oracle(const Graph& g, const KernelRegistry& oracle, Tensor value, const Node* dq,
                          const std::vector<const Node*>& pointwise, const Node& q) {
  Graph mini;
  mini.opset = g.opset;
  mini.source = g.source;
  auto copy_operands = [&](Node& n) {
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty()) mini.initializers[n.inputs[i]] = g.initializers.at(n.inputs[i]);
  };
  mini.initializers["mosaic.value"] = std::move(value);
  std::string cur = "mosaic.value";
  std::vector<const Node*> chain;
  if (dq) chain.push_back(dq);
  chain.insert(chain.end(), pointwise.begin(), pointwise.end());
  chain.push_back(&q);
  for (size_t i = 0; i < chain.size(); ++i) {
    Node n = *chain[i];
    n.inputs[0] = cur;
    n.outputs = {i + 1 == chain.size() ? std::string("mosaic.result") : "mosaic.v" + std::to_string(i)};
    copy_operands(n);
    cur = n.outputs[0];
    mini.nodes.push_back(std::move(n));
  }
  ValueInfo out;
  out.name = "mosaic.result";
  mini.outputs.push_back(out);
  if (!prepare_graph(mini, oracle, PrepareOptions{}).ok()) return Tensor{};
  auto it = mini.initializers.find("mosaic.result");
  return it == mini.initializers.end() ? Tensor{} : it->second;
}

/// The 256 codes of `t` (uint8: 0..255; int8: -128..127), in order.
Tensor every_code(DType t) {
  Tensor codes = Tensor::empty({t, {256}});
  for (int i = 0; i < 256; ++i) static_cast<uint8_t*>(codes.data())[i] = static_cast<uint8_t>(t == DType::kI8 ? i - 128 : i);
  return codes;
}

/// The rewritten stretch on a copy of the graph, or nothing where a table does not fold or
/// `accept` refuses a new node. `parts`: the stretch's node indices in `g`.
std::optional<Graph> rewrite(const Graph& g, const Stretch& s, const std::vector<size_t>& parts,
                             const KernelRegistry& oracle, const std::function<bool(const Graph&, const Node&)>& accept,
                             std::string& name) {
  std::vector<const Node*> pointwise, movement;
  for (const Node* n : s.steps) (step_of(g, *n) == Step::kPointwise ? pointwise : movement).push_back(n);
  Tensor table = through_the_oracle(g, oracle, every_code(s.in), s.dq, pointwise, *s.q);
  if (!table.defined() || table.numel() != 256 || table.dtype() != s.out) return std::nullopt;

  Graph out = g;
  name = s.dq->name;
  for (const Node* n : s.steps) name += "+" + n->name;
  name += "+" + s.q->name;
  // Each new value: codes of Q's type in the shape of the float value it stands for; the last
  // is the QuantizeLinear's output.
  auto codes_for = [&](const std::string& float_value, bool last) {
    const std::string v = last ? s.q->outputs[0] : fuse::fresh_name(out, float_value + ".codes");
    out.value_descs[v] = TensorDesc{s.out, g.value_descs.at(float_value).shape};
    return v;
  };
  std::vector<Node> made;
  Node lookup;
  lookup.op_type = kCodeLookupOp;
  lookup.domain = kCodeLookupDomain;
  lookup.name = name;
  lookup.inputs = {s.dq->inputs[0], fuse::add_constant(out, s.dq->name + ".code_table", table)};
  lookup.outputs = {codes_for(s.dq->outputs[0], movement.empty())};
  made.push_back(lookup);
  // Then every step that moves values, on codes, in order.
  for (size_t i = 0; i < movement.size(); ++i) {
    Node n = *movement[i];
    n.inputs[0] = made.back().outputs[0];
    if (n.op_key() == "Pad") {
      // A padded value goes through the pointwise steps after the Pad, then the quantisation.
      std::vector<const Node*> after;
      const auto at = std::find(s.steps.begin(), s.steps.end(), movement[i]);
      for (auto it = at + 1; it != s.steps.end(); ++it)
        if (step_of(g, **it) == Step::kPointwise) after.push_back(*it);
      double fill = 0;
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) fill = g.initializers.at(n.inputs[2]).get(0);
      else if (g.opset < 11) fill = n.attr_float("value", 0.f);
      Tensor code = through_the_oracle(g, oracle, Tensor::from_f32({1}, {static_cast<float>(fill)}), nullptr, after, *s.q);
      if (!code.defined() || code.numel() != 1) return std::nullopt;
      if (g.opset < 11) {
        n.attrs["value"] = Attribute::of_float(static_cast<float>(code.get(0)));
      } else {
        if (n.inputs.size() < 3) n.inputs.resize(3);
        n.inputs[2] = fuse::add_constant(out, n.name + ".pad_code", code.reshaped({}));
      }
    }
    n.outputs = {codes_for(movement[i]->outputs[0], i + 1 == movement.size())};
    made.push_back(n);
  }
  for (const Node& n : made)
    if (!accept(out, n)) return std::nullopt;
  // The stretch's nodes go (its float values with them); the new ones stand where the
  // DequantizeLinear stood, which every later part follows.
  out.value_descs.erase(s.dq->outputs[0]);
  for (const Node* n : s.steps) out.value_descs.erase(n->outputs[0]);
  std::vector<Node> nodes;
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    if (i == parts.front()) nodes.insert(nodes.end(), made.begin(), made.end());
    if (std::find(parts.begin(), parts.end(), i) == parts.end()) nodes.push_back(std::move(out.nodes[i]));
  }
  out.nodes = std::move(nodes);
  return out;
}

/// The pads of a Pad of codes that a QLinearConv could take as its own: constant mode, the
/// spatial axes only, none cropped, its value the convolution's input zero point (a padded
/// position's code minus the zero point is 0, as at the convolution's own padding). Empty
/// where it cannot.
std::optional<std::vector<int64_t>> foldable_pads(const Graph& g, const Node& pad, const Node& conv) {
  const TensorDesc* x = fuse::desc_of(g, pad.inputs[0]);
  if (!x || !is_byte(x->dtype) || pad.attr_string("mode", "constant") != "constant") return std::nullopt;
  const size_t r = x->shape.size();
  std::vector<int64_t> pads;
  double value = 0;
  if (g.opset < 11) {
    pads = pad.attr_ints("pads");
    value = pad.attr_float("value", 0.f);
  } else {
    if (pad.inputs.size() < 2 || (pad.inputs.size() > 3 && !pad.inputs[3].empty())) return std::nullopt;  // axes
    auto p = g.initializers.find(pad.inputs[1]);
    if (p == g.initializers.end()) return std::nullopt;
    for (int64_t i = 0; i < p->second.numel(); ++i) pads.push_back(p->second.get_i64(i));
    if (pad.inputs.size() > 2 && !pad.inputs[2].empty()) {
      const Tensor* v = scalar_constant(g, pad.inputs[2]);
      if (!v) return std::nullopt;
      value = v->get(0);
    }
  }
  if (r < 3 || pads.size() != 2 * r || pads[0] || pads[1] || pads[r] || pads[r + 1]) return std::nullopt;
  for (int64_t v : pads)
    if (v < 0) return std::nullopt;
  const Tensor* zp = conv.inputs.size() > 2 ? scalar_constant(g, conv.inputs[2]) : nullptr;
  if (!zp || zp->dtype() != x->dtype || zp->get(0) != value || conv.attr_string("auto_pad", "NOTSET") != "NOTSET")
    return std::nullopt;
  std::vector<int64_t> own = conv.attr_ints("pads", std::vector<int64_t>(2 * (r - 2), 0));
  if (own.size() != 2 * (r - 2)) return std::nullopt;
  for (size_t a = 0; a + 2 < r; ++a) {
    own[a] += pads[a + 2];
    own[a + r - 2] += pads[a + 2 + r];
  }
  return own;
}

/// Pad of codes -> QLinearConv, where the pads fold (foldable_pads) and `accept` takes the
/// convolution with them: one node, the Pad gone.
void fold_code_pads(Graph& g, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report) {
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& pad = g.nodes[i];
      if (pad.op_key() != "Pad" || pad.inputs.empty() || pad.outputs.size() != 1) continue;
      const Node* conv = M.sole_consumer(pad.outputs[0], "QLinearConv");
      if (!conv || conv->inputs[0] != pad.outputs[0]) continue;
      const std::optional<std::vector<int64_t>> pads = foldable_pads(g, pad, *conv);
      if (!pads) continue;
      Node fused = *conv;
      fused.inputs[0] = pad.inputs[0];
      fused.attrs["pads"] = Attribute::of_ints(*pads);
      fused.name = pad.name + "+" + conv->name;
      if (!accept(g, fused)) continue;
      const std::string old_name = conv->name;
      fuse::replace_nodes(g, {&pad, conv}, std::move(fused), report);
      report.fused.erase(std::remove(report.fused.begin(), report.fused.end(), old_name), report.fused.end());
      changed = true;
    }
  }
}

/// Input `i` of `n`, or a constant zero of type `t` added to `g` where it is omitted (a zero
/// point); its name joins `added`.
std::string zero_point_or_zero(Graph& g, const Node& n, size_t i, DType t, std::vector<std::string>& added) {
  if (n.inputs.size() > i && !n.inputs[i].empty()) return n.inputs[i];
  added.push_back(fuse::add_constant(g, n.name + ".zero_point", Tensor::empty({t, {}})));
  return added.back();
}

bool fuse_qdq_add(Graph& g, size_t i, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report);

/// A QDQ model's residual Add: Add(DequantizeLinear(a), DequantizeLinear(b)) [-> Relu] ->
/// QuantizeLinear, each quantisation per tensor and of one 8-bit type, A, B and the sum of one
/// shape, as one com.microsoft QLinearAdd on the codes (a Relu fused as its activation: the
/// maximum with C's zero point, which is Q(relu(v)) exactly). Not exact, as no integer fusion
/// is: QLinearAdd scales each difference by its ratio to C's scale where the chain dequantises,
/// adds and divides, so a sum on a rounding edge may take the neighbouring code.
void fuse_qdq_adds(Graph& g, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report) {
  // Each rewrite moves the indices: the scan starts again (a model has a few dozen Adds).
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) changed = fuse_qdq_add(g, i, accept, report);
  }
}

/// fuse_qdq_adds on the node at `i`: whether it rewrote it.
bool fuse_qdq_add(Graph& g, size_t i, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report) {
  {
    const Node& add = g.nodes[i];
    if (add.op_key() != "Add" || add.inputs.size() != 2 || add.outputs.size() != 1 || add.inputs[0] == add.inputs[1])
      return false;
    const fuse::Matcher M(g);
    const Node* da = M.made_by(add.inputs[0], "DequantizeLinear");
    const Node* db = M.made_by(add.inputs[1], "DequantizeLinear");
    const TensorDesc* y = fuse::desc_of(g, add.outputs[0]);
    if (!da || !db || !y) return false;
    const TensorDesc* xa = fuse::desc_of(g, da->inputs[0]);
    const TensorDesc* xb = fuse::desc_of(g, db->inputs[0]);
    if (!xa || !xb || !is_byte(xa->dtype) || xb->dtype != xa->dtype || xa->shape != y->shape || xb->shape != y->shape ||
        !per_tensor_bytes(g, *da, xa->dtype) || !per_tensor_bytes(g, *db, xa->dtype))
      return false;
    const Node* relu = M.sole_consumer(add.outputs[0], "Relu");
    const std::string sum = relu ? relu->outputs[0] : add.outputs[0];
    const Node* q = M.sole_consumer(sum, "QuantizeLinear");
    const TensorDesc* yq = q ? fuse::desc_of(g, q->outputs[0]) : nullptr;
    if (!q || q->inputs[0] != sum || !yq || yq->dtype != xa->dtype || !per_tensor_bytes(g, *q, xa->dtype)) return false;
    std::vector<std::string> added;
    Node fused;
    fused.op_type = "QLinearAdd";
    fused.domain = "com.microsoft";
    fused.name = add.name + (relu ? "+" + relu->name : "") + "+" + q->name;
    fused.inputs = {da->inputs[0], da->inputs[1], zero_point_or_zero(g, *da, 2, xa->dtype, added),
                    db->inputs[0], db->inputs[1], zero_point_or_zero(g, *db, 2, xa->dtype, added),
                    q->inputs[1],  zero_point_or_zero(g, *q, 2, xa->dtype, added)};
    if (relu) fused.attrs["mosaic.activation"] = Attribute::of_string("Relu");
    fused.outputs = {q->outputs[0]};
    if (!accept(g, fused)) {
      fuse::drop_constants(g, added);
      return false;
    }
    std::vector<const Node*> parts{&add, q};
    if (relu) parts.push_back(relu);
    for (const Node* d : {da, db})
      if (M.once(d->outputs[0])) parts.push_back(d);
    fuse::replace_nodes(g, parts, std::move(fused), report);
    return true;
  }
}

}  // namespace

void fuse_qdq_codes(Graph& g, const std::function<bool(const Graph&, const Node&)>& accept, const KernelRegistry* oracle,
                    FuseReport& report) {
  if (!accept || !oracle) return;
  // One pass over the nodes: a rewrite changes nothing before its DequantizeLinear, so the scan
  // goes on from there (with the index rebuilt).
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op_key() != "DequantizeLinear") continue;
    const fuse::Matcher M(g);
    {
      const std::optional<Stretch> s = stretch_from(g, M, readers(g), g.nodes[i]);
      if (!s) continue;
      std::vector<size_t> parts{i};
      for (size_t k = i + 1; k < g.nodes.size(); ++k) {
        const Node* n = &g.nodes[k];
        if (n == s->q || std::find(s->steps.begin(), s->steps.end(), n) != s->steps.end()) parts.push_back(k);
      }
      std::string name;
      std::optional<Graph> rewritten =
          parts.size() == s->steps.size() + 2 ? rewrite(g, *s, parts, *oracle, accept, name) : std::nullopt;
      if (!rewritten) continue;
      g = std::move(*rewritten);
      report.fused.push_back(name);
    }
  }
  fold_code_pads(g, accept, report);
  fuse_qdq_adds(g, accept, report);
}

}  // namespace mosaic
