// A QDQ model's quantised convolutions and matrix products as integer ops (issue 52, item 2).
// MatMul by constant weights becomes QLinearMatMul the same way (no bias: a QDQ MatMul's Add
// stays float after its DequantizeLinear), and Gemm (a fully connected layer) com.microsoft's
// QGemm, its C as int32 codes like a convolution's bias. A QDQ model states
// each quantised convolution as float arithmetic between quantisation nodes:
//   x = DequantizeLinear(x_q, x_scale, x_zp)
//   y = Conv(x, W, B)            W, B: DequantizeLinear of the model's integer codes, folded
//                                at load (Graph::dequantized keeps the codes)
//   y_q = QuantizeLinear(y, y_scale, y_zp)
// and ONNX Runtime, TensorRT and OpenVINO run it as one integer convolution. So does this
// pass: the three become
//   y_q = QLinearConv(x_q, x_scale, x_zp, W_q, w_scale, w_zp, y_scale, y_zp, B_q)
// with W_q the stored codes, and B_q the bias at scale x_scale * w_scale[m] (ONNX's rule for
// QLinearConv's bias): the stored int32 codes where the model's bias scale is that product,
// else the folded float bias divided by it and rounded half to even (as ONNX Runtime's
// fusion does), refused where it would not fit in int32.
//
// Not exact, as no integer fusion is: the float convolution rounds each product sum once
// more than the int32 accumulator does, so an output lying within a float rounding of a
// quantisation edge may take the neighbouring code (one step of y_scale). `bench` and
// `verify` compare quantised outputs within one step for that reason (docs/quantization.md).
//
// Only where FuseOptions::integer accepts the fused node (the backend that will run it
// computes it: its capability query on the node's descriptors and constants), in inference
// plans. A DequantizeLinear with other readers stays for them.
#include <cmath>
#include <limits>
#include <optional>

#include "core/fuse.hpp"
#include "core/fuse_match.hpp"
#include "operators/ms_quantize.hpp"

namespace mosaic {
namespace {

/// A float32 or integer initializer with one element.
const Tensor* scalar_initializer(const Graph& g, const std::string& v) {
  auto it = g.initializers.find(v);
  return it == g.initializers.end() || it->second.numel() != 1 ? nullptr : &it->second;
}

bool is_byte(DType t) { return t == DType::kU8 || t == DType::kI8; }

/// A zero of one element of type `t` (an omitted zero point made explicit).
Tensor zero_of(DType t) { return Tensor::empty({t, {}}); }

/// The bias at scale x_scale * w_scale[m] as int32 codes, or an empty tensor where a value
/// does not fit. `stored`: the model's own codes, used as they are where its scale is that
/// product (what quantisers write); else the float bias is divided by it and rounded half to
/// even.
Tensor int32_bias(const Tensor& bias, const Dequantized* stored, double x_scale, const Tensor& w_scale) {
  const int64_t m = bias.numel();
  Tensor out = Tensor::empty({DType::kI32, {m}});
  auto* codes = static_cast<int32_t*>(out.data());
  bool same_scale = stored && stored->codes.dtype() == DType::kI32 && stored->codes.numel() == m;
  if (same_scale && stored->zero_point.defined())
    for (int64_t i = 0; i < stored->zero_point.numel(); ++i) same_scale = same_scale && stored->zero_point.get_i64(i) == 0;
  for (int64_t i = 0; i < m && same_scale; ++i) {
    const double want = x_scale * w_scale.get(w_scale.numel() == 1 ? 0 : i);
    const double have = stored->scale.get(stored->scale.numel() == 1 ? 0 : i);
    same_scale = std::fabs(have - want) <= 1e-6 * std::fabs(want);
  }
  for (int64_t i = 0; i < m; ++i) {
    if (same_scale) {
      codes[i] = static_cast<int32_t>(stored->codes.get_i64(i));
      continue;
    }
    const double s = x_scale * w_scale.get(w_scale.numel() == 1 ? 0 : i);
    const double q = s > 0 ? std::nearbyint(static_cast<double>(bias.f32()[i]) / s) : NAN;
    if (!(std::fabs(q) <= static_cast<double>(std::numeric_limits<int32_t>::max()))) return Tensor{};
    codes[i] = static_cast<int32_t>(q);
  }
  return out;
}

/// The quantisation either side of a product: x's codes, scale and zero point (the
/// DequantizeLinear it reads) and y's (the QuantizeLinear after it, where there is one), 8-bit
/// codes with positive float32 scales and scalar constant zero points; nothing where they are
/// not.
struct QdqEnds {
  const TensorDesc *xq = nullptr, *yq = nullptr;
  const Tensor* xs = nullptr;
  bool has_xz = false, has_yz = false;
};
std::optional<QdqEnds> qdq_ends(const Graph& g, const Node& dq, const Node* q) {
  if (dq.attr_int("block_size", 0) != 0) return std::nullopt;
  QdqEnds e;
  e.xq = fuse::desc_of(g, dq.inputs[0]);
  e.xs = dq.inputs.size() > 1 ? scalar_initializer(g, dq.inputs[1]) : nullptr;
  e.has_xz = dq.inputs.size() > 2 && !dq.inputs[2].empty();
  if (!e.xq || !is_byte(e.xq->dtype) || !e.xs || e.xs->dtype() != DType::kF32 ||
      (e.has_xz && !scalar_initializer(g, dq.inputs[2])) || !(e.xs->get(0) > 0))
    return std::nullopt;
  if (!q) return e;
  if (q->attr_int("block_size", 0) != 0) return std::nullopt;
  e.yq = fuse::desc_of(g, q->outputs[0]);
  const Tensor* ys = q->inputs.size() > 1 ? scalar_initializer(g, q->inputs[1]) : nullptr;
  e.has_yz = q->inputs.size() > 2 && !q->inputs[2].empty();
  if (!e.yq || !is_byte(e.yq->dtype) || !ys || ys->dtype() != DType::kF32 ||
      (e.has_yz && !scalar_initializer(g, q->inputs[2])) || !(ys->get(0) > 0))
    return std::nullopt;
  return e;
}

/// The eight inputs QLinearConv, QLinearMatMul and QGemm share: x's codes, scale and zero
/// point, the weights' codes, scales and zero points, y's scale and zero point (the first six
/// without a QuantizeLinear `q`); the omitted zero points made explicit and every new constant
/// named after `base` and listed in `added`.
std::vector<std::string> qlinear_inputs(Graph& g, const Node& dq, const Node* q, const QdqEnds& e, const Dequantized& wd,
                                        const std::string& base, std::vector<std::string>& added) {
  auto add = [&](const char* what, Tensor t) {
    added.push_back(fuse::add_constant(g, base + what, std::move(t)));
    return added.back();
  };
  std::vector<std::string> in = {dq.inputs[0], dq.inputs[1], e.has_xz ? dq.inputs[2] : add(".x_zero_point", zero_of(e.xq->dtype)),
                                 add(".w_quantized", wd.codes), add(".w_scale", wd.scale),
                                 add(".w_zero_point", wd.zero_point.defined() ? wd.zero_point : zero_of(DType::kI8))};
  if (q) in.insert(in.end(), {q->inputs[1], e.has_yz ? q->inputs[2] : add(".y_zero_point", zero_of(e.yq->dtype))});
  return in;
}

/// The QLinearConv of DequantizeLinear `dq` -> Conv `conv` -> QuantizeLinear `q`, or nothing
/// where the pieces are not what it needs. The initializers it adds to `g` for a returned node
/// (codes, scales, zero points made explicit) are named in `added`; nothing is added otherwise.
std::optional<Node> qlinear_conv(Graph& g, const Node& dq, const Node& conv, const Node& q, std::vector<std::string>& added) {
  if (conv.has_attr("mosaic.activation")) return std::nullopt;
  const std::optional<QdqEnds> ends = qdq_ends(g, dq, &q);
  if (!ends) return std::nullopt;
  auto w = g.dequantized.find(conv.inputs[1]);
  if (w == g.dequantized.end() || w->second.codes.dtype() != DType::kI8 ||
      (w->second.scale.numel() != 1 && w->second.axis != 0))
    return std::nullopt;
  const Dequantized& wd = w->second;
  // The bias first: a candidate refused here has added nothing to the graph.
  Tensor bias_codes;
  if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) {
    auto b = g.initializers.find(conv.inputs[2]);
    if (b == g.initializers.end() || b->second.dtype() != DType::kF32 || b->second.rank() != 1) return std::nullopt;
    auto stored = g.dequantized.find(conv.inputs[2]);
    bias_codes = int32_bias(b->second, stored == g.dequantized.end() ? nullptr : &stored->second, ends->xs->get(0), wd.scale);
    if (!bias_codes.defined()) return std::nullopt;
  }
  Node fused;
  fused.op_type = "QLinearConv";
  fused.name = conv.name + "+" + q.name;
  fused.attrs = conv.attrs;
  fused.inputs = qlinear_inputs(g, dq, &q, *ends, wd, conv.name, added);
  if (bias_codes.defined()) {
    added.push_back(fuse::add_constant(g, conv.name + ".b_quantized", std::move(bias_codes)));
    fused.inputs.push_back(added.back());
  }
  fused.outputs = {q.outputs[0]};
  return fused;
}

/// The QLinearMatMul of DequantizeLinear `dq` -> MatMul `mm` (by constant weights, per tensor
/// or per column of B) -> QuantizeLinear `q`, or nothing where the pieces are not what it
/// needs; the initializers it adds are named in `added`.
std::optional<Node> qlinear_matmul(Graph& g, const Node& dq, const Node& mm, const Node& q, std::vector<std::string>& added) {
  const std::optional<QdqEnds> ends = qdq_ends(g, dq, &q);
  if (!ends) return std::nullopt;
  auto w = g.dequantized.find(mm.inputs[1]);
  if (w == g.dequantized.end() || w->second.codes.dtype() != DType::kI8 || w->second.codes.rank() != 2 ||
      (w->second.scale.numel() != 1 && w->second.axis != 1))
    return std::nullopt;
  Node fused;
  fused.op_type = "QLinearMatMul";
  fused.name = mm.name + "+" + q.name;
  fused.inputs = qlinear_inputs(g, dq, &q, *ends, w->second, mm.name, added);
  fused.outputs = {q.outputs[0]};
  return fused;
}

/// The QGemm of DequantizeLinear `dq` -> Gemm `gemm` (A as it is, B constant weights per
/// tensor or per output column, alpha and beta 1, C of one value per column) ->
/// QuantizeLinear `q`, or float32 out where `q` is null (a classifier's last layer), or nothing
/// where the pieces are not what it needs; the initializers it adds are named in `added`.
std::optional<Node> qgemm(Graph& g, const Node& dq, const Node& gemm, const Node* q, std::vector<std::string>& added) {
  if (gemm.has_attr("mosaic.activation") || gemm.attr_int("transA", 0) != 0 || gemm.attr_float("alpha", 1.f) != 1.f ||
      gemm.attr_float("beta", 1.f) != 1.f)
    return std::nullopt;
  const std::optional<QdqEnds> ends = qdq_ends(g, dq, q);
  if (!ends) return std::nullopt;
  const bool tb = gemm.attr_int("transB", 0) != 0;
  auto w = g.dequantized.find(gemm.inputs[1]);
  if (w == g.dequantized.end() || w->second.codes.dtype() != DType::kI8 || w->second.codes.rank() != 2 ||
      (w->second.scale.numel() != 1 && w->second.axis != (tb ? 0 : 1)))
    return std::nullopt;
  const Dequantized& wd = w->second;
  const int64_t n = wd.codes.dim(tb ? 0 : 1);
  Tensor c_codes;
  if (gemm.inputs.size() > 2 && !gemm.inputs[2].empty()) {
    auto c = g.initializers.find(gemm.inputs[2]);
    if (c == g.initializers.end() || c->second.dtype() != DType::kF32 || c->second.numel() != n ||
        c->second.dim(c->second.rank() - 1) != n)
      return std::nullopt;
    auto stored = g.dequantized.find(gemm.inputs[2]);
    c_codes = int32_bias(c->second, stored == g.dequantized.end() ? nullptr : &stored->second, ends->xs->get(0), wd.scale);
    if (!c_codes.defined()) return std::nullopt;
  }
  Node fused;
  fused.op_type = "QGemm";
  fused.domain = kMicrosoftDomain;
  fused.name = q ? gemm.name + "+" + q->name : gemm.name;
  if (tb) fused.attrs["transB"] = Attribute::of_int(1);
  fused.inputs = qlinear_inputs(g, dq, q, *ends, wd, gemm.name, added);
  // QGemm's C sits between B's zero point and y's scale.
  std::string c_name;
  if (c_codes.defined()) {
    added.push_back(fuse::add_constant(g, gemm.name + ".c_quantized", std::move(c_codes)));
    c_name = added.back();
  }
  if (q || !c_name.empty()) fused.inputs.insert(fused.inputs.begin() + 6, c_name);
  fused.outputs = {q ? q->outputs[0] : gemm.outputs[0]};
  return fused;
}

}  // namespace

void fuse_qdq_convs(Graph& g, const std::function<bool(const Graph&, const Node&)>& accept, FuseReport& report) {
  if (!accept) return;
  for (bool changed = true; changed;) {
    changed = false;
    const fuse::Matcher M(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& conv = g.nodes[i];  // a Conv, a MatMul or a Gemm
      const bool matmul = conv.op_key() == "MatMul", gemm = conv.op_key() == "Gemm";
      if ((conv.op_key() != "Conv" && !matmul && !gemm) || conv.inputs.size() < 2 || conv.outputs.size() != 1) continue;
      const Node* dq = M.made_by(conv.inputs[0], "DequantizeLinear");
      const Node* q = M.sole_consumer(conv.outputs[0], "QuantizeLinear");
      if (q && (q->outputs.size() != 1 || q->inputs[0] != conv.outputs[0])) q = nullptr;
      // Without a QuantizeLinear after it, a Gemm still becomes QGemm with a float32 output.
      if (!dq || dq->inputs.empty() || (!q && !gemm)) continue;
      std::vector<std::string> added;
      std::optional<Node> fused = matmul ? qlinear_matmul(g, *dq, conv, *q, added)
                                  : gemm ? qgemm(g, *dq, conv, q, added)
                                         : qlinear_conv(g, *dq, conv, *q, added);
      if (!fused) continue;
      if (!accept(g, *fused)) {
        fuse::drop_constants(g, added);
        continue;
      }
      std::vector<const Node*> parts{&conv};
      if (q) parts.push_back(q);
      if (M.once(conv.inputs[0])) parts.insert(parts.begin(), dq);
      fuse::replace_nodes(g, parts, std::move(*fused), report);
      changed = true;
    }
  }
}

}  // namespace mosaic
