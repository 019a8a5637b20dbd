#include "core/qdq.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <set>

#include "core/prepare.hpp"

namespace mosaic {
namespace {

/// How a quantised node's input is quantised.
struct InputRole {
  enum Kind { kNone, kActivation, kWeight, kBias } kind = kNone;
  int64_t axis = -1;  ///< kWeight: the per-channel axis (-1: one scale for the tensor)
};

bool is_float_initializer(const Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  return it != g.initializers.end() && it->second.dtype() == DType::kF32;
}

bool is_graph_output(const Graph& g, const std::string& name) {
  return std::any_of(g.outputs.begin(), g.outputs.end(), [&](const ValueInfo& v) { return v.name == name; });
}

/// The role of each of n's inputs. A weight's channel axis is its output channel: Conv's W
/// [M, C/g, kh, kw] axis 0; MatMul's B [.., K, N] its last; Gemm's B [K, N] axis 1 ([N, K]
/// with transB: 0). A bias (Conv's B, Gemm's C of N values) is an initializer of one axis.
std::vector<InputRole> input_roles(const Graph& g, const Node& n, const std::map<std::string, TensorDesc>& descs,
                                   bool per_channel) {
  std::vector<InputRole> roles(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const std::string& name = n.inputs[i];
    if (name.empty()) continue;
    if (is_float_initializer(g, name)) {
      const Tensor& t = g.initializers.at(name);
      const bool bias = (n.op_type == "Conv" || n.op_type == "Gemm") && i == 2;
      if (bias) {
        if (t.rank() == 1) roles[i] = {InputRole::kBias, 0};
        continue;
      }
      int64_t axis = -1;
      if (per_channel && i == 1) {
        if (n.op_type == "Conv" && t.rank() >= 2) axis = 0;
        if (n.op_type == "MatMul" && t.rank() >= 2) axis = static_cast<int64_t>(t.rank()) - 1;
        if (n.op_type == "Gemm" && t.rank() == 2) axis = n.attr_int("transB", 0) ? 0 : 1;
      }
      roles[i] = {InputRole::kWeight, axis};
      continue;
    }
    if (g.initializers.count(name)) continue;  // an integer initializer (a shape): left as it is
    auto d = descs.find(name);
    if (d != descs.end() && d->second.dtype == DType::kF32) roles[i] = {InputRole::kActivation, -1};
  }
  return roles;
}

/// Why n stays float, or "" when it is quantised.
std::string why_float(const Graph& g, const Node& n, const std::map<std::string, TensorDesc>& descs) {
  for (const auto& name : n.inputs) {
    if (name.empty() || g.initializers.count(name)) continue;
    auto d = descs.find(name);
    if (d == descs.end()) return "input '" + name + "' has no known type";
    if (d->second.dtype != DType::kF32 && (n.op_type == "Conv" || n.op_type == "MatMul" || n.op_type == "Gemm"))
      return "input '" + name + "' is " + dtype_name(d->second.dtype) + ", not float32";
  }
  return "";
}

/// Symmetric int8 codes of a float weight, one scale per index of `axis` (or one for all).
struct QuantizedWeight {
  Tensor codes;  ///< int8, w's shape
  Tensor scale;  ///< float32: [channels], or a scalar
};

QuantizedWeight quantize_weight(const Tensor& w, int64_t axis, bool reduce_range) {
  const int64_t qmax = reduce_range ? 63 : 127;
  int64_t outer = 1, channels = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(w.rank()); ++d) {
    if (axis < 0) inner *= w.dim(d);
    else if (d < axis) outer *= w.dim(d);
    else if (d == axis) channels = w.dim(d);
    else inner *= w.dim(d);
  }
  std::vector<float> amax(static_cast<size_t>(channels), 0.f);
  const float* x = w.f32();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i)
        amax[c] = std::max(amax[c], std::fabs(x[(o * channels + c) * inner + i]));
  QuantizedWeight q;
  q.scale = Tensor::empty({DType::kF32, axis < 0 ? Shape{} : Shape{channels}});
  for (int64_t c = 0; c < channels; ++c) {
    const float s = amax[c] / static_cast<float>(qmax);
    q.scale.f32()[c] = s >= FLT_MIN ? s : 1.f;  // an all-zero channel: any scale codes it as 0
  }
  q.codes = Tensor::empty({DType::kI8, w.shape()});
  auto* codes = static_cast<int8_t*>(q.codes.data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = (o * channels + c) * inner + i;
        const float r = std::nearbyint(x[k] / q.scale.f32()[c]);
        codes[k] = static_cast<int8_t>(std::clamp<float>(r, static_cast<float>(-qmax), static_cast<float>(qmax)));
      }
  return q;
}

/// Fresh names for the values, nodes and initializers a rewrite adds.
class Names {
 public:
  explicit Names(const Graph& g) {
    for (const auto& v : g.inputs) taken_.insert(v.name);
    for (const auto& v : g.outputs) taken_.insert(v.name);
    for (const auto& [name, t] : g.initializers) taken_.insert(name);
    for (const auto& n : g.nodes) {
      taken_.insert(n.name);
      taken_.insert(n.inputs.begin(), n.inputs.end());
      taken_.insert(n.outputs.begin(), n.outputs.end());
    }
  }
  std::string fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; !taken_.insert(name).second; ++k) name = base + "_" + std::to_string(k);
    return name;
  }

 private:
  std::set<std::string> taken_;
};

Node make_node(const std::string& op, std::string name, std::vector<std::string> inputs, std::string output, int64_t axis) {
  Node n;
  n.op_type = op;
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.outputs = {std::move(output)};
  if (axis >= 0) n.attrs["axis"] = Attribute::of_int(axis);
  return n;
}

Tensor scalar_of(DType type, int32_t v) {
  Tensor t = Tensor::empty({type, {}});
  if (type == DType::kU8) t.u8()[0] = static_cast<uint8_t>(v);
  else if (type == DType::kI8) static_cast<int8_t*>(t.data())[0] = static_cast<int8_t>(v);
  else t.f32()[0] = static_cast<float>(v);
  return t;
}

}  // namespace

Expected<QdqTargets> qdq_targets(const Graph& g, const std::map<std::string, TensorDesc>& descs, const QdqOptions& o) {
  const std::string where = g.source.empty() ? "quantize" : g.source;
  if (g.opset < 10) return Status::invalid(where + ": opset " + std::to_string(g.opset) + ": QuantizeLinear needs opset 10 or later");
  if (o.per_channel && g.opset < 13)
    return Status::invalid(where + ": opset " + std::to_string(g.opset) +
                           ": per-channel weights need DequantizeLinear's axis (opset 13); quantize per tensor instead");
  if (o.activation_type != DType::kU8 && o.activation_type != DType::kI8)
    return Status::invalid("activations quantise to uint8 or int8, not " + std::string(dtype_name(o.activation_type)));
  if (o.symmetric_activations && o.activation_type != DType::kI8)
    return Status::invalid("symmetric activations are int8 (uint8's zero point cannot be 0 for signed values)");
  for (const auto& op : o.op_types)
    if (op.empty() || op == "QuantizeLinear" || op == "DequantizeLinear" || op.find('.') != std::string::npos)
      return Status::invalid("op type '" + op + "' cannot be quantised (give ONNX ops such as Conv, MatMul, Gemm)");
  for (const auto& name : o.exclude)
    if (std::none_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.name == name; }))
      return Status::invalid(where + " has no node named '" + name + "' to exclude");
  QdqTargets t;
  std::set<std::string> seen;
  auto add_activation = [&](const std::string& v) {
    if (!is_graph_output(g, v) && seen.insert(v).second) t.activations.push_back(v);
  };
  for (const auto& n : g.nodes) {
    for (const auto& [key, a] : n.attrs)
      if (a.kind == Attribute::Kind::kGraph)
        return Status::unsupported(where + ": " + n.label() + " holds a subgraph; quantize rewrites graphs without control flow");
    const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
    if (!onnx || std::find(o.op_types.begin(), o.op_types.end(), n.op_type) == o.op_types.end()) continue;
    if (std::find(o.exclude.begin(), o.exclude.end(), n.name) != o.exclude.end()) {
      t.skipped.push_back(n.label() + ": excluded");
      continue;
    }
    if (const std::string why = why_float(g, n, descs); !why.empty()) {
      t.skipped.push_back(n.label() + ": " + why);
      continue;
    }
    const auto roles = input_roles(g, n, descs, o.per_channel);
    if (std::none_of(roles.begin(), roles.end(), [](const InputRole& r) { return r.kind != InputRole::kNone; })) {
      t.skipped.push_back(n.label() + ": no float input");
      continue;
    }
    t.nodes.push_back(n.name);
    for (size_t i = 0; i < roles.size(); ++i)
      if (roles[i].kind == InputRole::kActivation) add_activation(n.inputs[i]);
    for (const auto& out : n.outputs) {
      auto d = descs.find(out);
      if (!out.empty() && d != descs.end() && d->second.dtype == DType::kF32) add_activation(out);
    }
  }
  return t;
}

QuantParams activation_params(float lo_in, float hi_in, DType type, bool symmetric) {
  const double lo = std::min<double>(lo_in, 0.0), hi = std::max<double>(hi_in, 0.0);
  QuantParams p;
  if (symmetric) {
    const double s = std::max(-lo, hi) / 127.0;
    p.scale = s >= FLT_MIN ? static_cast<float>(s) : 1.f;
    return p;
  }
  const double qmin = type == DType::kU8 ? 0 : -128, qmax = type == DType::kU8 ? 255 : 127;
  const double s = (hi - lo) / (qmax - qmin);
  if (!(s >= FLT_MIN)) {
    p.zero_point = 0;  // a tensor that is always 0
    return p;
  }
  p.scale = static_cast<float>(s);
  p.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(qmin - lo / p.scale), qmin, qmax));
  return p;
}

Expected<QdqRewrite> apply_qdq(Graph& g, const QdqTargets& targets,
                               const std::map<std::string, std::pair<float, float>>& ranges, const QdqOptions& o) {
  QdqRewrite report;
  Names names(g);
  std::map<std::string, std::string> dequantised;  // activation -> its DequantizeLinear's output
  std::map<std::string, QuantParams> params;
  std::map<std::string, std::vector<Node>> after;   // value -> the Q/DQ pair that follows its producer
  std::vector<Node> front;                          // weights' DQs and graph inputs' Q/DQ pairs
  std::set<std::string> produced, own_quantizers;
  for (const auto& n : g.nodes) produced.insert(n.outputs.begin(), n.outputs.end());
  for (const auto& a : targets.activations) {
    auto r = ranges.find(a);
    if (r == ranges.end()) return Status::invalid("quantize: activation '" + a + "' has no calibrated range");
    const QuantParams p = activation_params(r->second.first, r->second.second, o.activation_type, o.symmetric_activations);
    params[a] = p;
    const std::string scale = names.fresh(a + "_scale"), zp = names.fresh(a + "_zero_point");
    const std::string q = names.fresh(a + "_quantized"), dq = names.fresh(a + "_dequantized");
    g.initializers[scale] = scalar_of(DType::kF32, 0);
    g.initializers[scale].f32()[0] = p.scale;
    g.initializers[zp] = scalar_of(o.activation_type, p.zero_point);
    std::vector<Node>& into = produced.count(a) ? after[a] : front;
    into.push_back(make_node("QuantizeLinear", names.fresh(a + "_QuantizeLinear"), {a, scale, zp}, q, -1));
    own_quantizers.insert(into.back().name);
    into.push_back(make_node("DequantizeLinear", names.fresh(a + "_DequantizeLinear"), {q, scale, zp}, dq, -1));
    dequantised[a] = dq;
  }
  // Weights (quantised once, however many nodes share them) and biases, per quantised node.
  std::map<std::string, std::pair<std::string, Tensor>> weights;  // float name -> (DQ output, scale)
  std::map<std::string, std::map<size_t, std::string>> node_inputs;  // node -> input index -> new name
  const std::set<std::string> quantised(targets.nodes.begin(), targets.nodes.end());
  std::map<std::string, TensorDesc> no_descs;
  for (const auto& n : g.nodes) {
    if (!quantised.count(n.name)) continue;
    const auto roles = input_roles(g, n, no_descs, o.per_channel);
    for (size_t i = 0; i < roles.size(); ++i) {
      if (roles[i].kind != InputRole::kWeight) continue;
      const std::string& w = n.inputs[i];
      if (!weights.count(w)) {
        QuantizedWeight q = quantize_weight(g.initializers.at(w), roles[i].axis, o.reduce_range);
        const std::string codes = names.fresh(w + "_quantized"), scale = names.fresh(w + "_scale");
        const std::string zp = names.fresh(w + "_zero_point"), dq = names.fresh(w + "_dequantized");
        Tensor zeros = Tensor::empty({DType::kI8, q.scale.shape()});
        std::memset(zeros.data(), 0, zeros.bytes());
        g.initializers[codes] = q.codes;
        g.initializers[scale] = q.scale;
        g.initializers[zp] = zeros;
        front.push_back(make_node("DequantizeLinear", names.fresh(w + "_DequantizeLinear"), {codes, scale, zp}, dq, roles[i].axis));
        weights[w] = {dq, q.scale};
        ++report.weights;
      }
      node_inputs[n.name][i] = weights[w].first;
    }
    // The bias: int32 codes at x_scale * w_scale[c], where x is quantised and its weight too.
    for (size_t i = 0; i < roles.size(); ++i) {
      if (roles[i].kind != InputRole::kBias) continue;
      const std::string& x = n.inputs[0];
      const std::string w = n.inputs.size() > 1 ? n.inputs[1] : "";
      if (!params.count(x) || !weights.count(w)) continue;
      const Tensor& b = g.initializers.at(n.inputs[i]);
      const Tensor& ws = weights.at(w).second;
      if (ws.numel() != 1 && ws.numel() != b.numel()) continue;  // a broadcast bias: stays float
      Tensor scale = Tensor::empty({DType::kF32, ws.numel() == 1 ? Shape{} : Shape{b.numel()}});
      Tensor codes = Tensor::empty({DType::kI32, b.shape()});
      auto* c = static_cast<int32_t*>(codes.data());
      bool fits = true;
      for (int64_t k = 0; k < b.numel(); ++k) {
        const float s = params.at(x).scale * ws.f32()[ws.numel() == 1 ? 0 : k];
        if (ws.numel() != 1 || k == 0) scale.f32()[ws.numel() == 1 ? 0 : k] = s;
        const double r = std::nearbyint(static_cast<double>(b.f32()[k]) / s);
        fits = fits && s >= FLT_MIN && std::fabs(r) <= 2147483647.0;
        c[k] = fits ? static_cast<int32_t>(r) : 0;
      }
      if (!fits) {
        report.notes.push_back(n.label() + ": bias '" + n.inputs[i] + "' stays float (its int32 codes at x_scale * w_scale overflow)");
        continue;
      }
      const std::string bias = n.inputs[i];
      const std::string cname = names.fresh(bias + "_quantized"), sname = names.fresh(bias + "_scale");
      const std::string dq = names.fresh(bias + "_dequantized");
      g.initializers[cname] = codes;
      g.initializers[sname] = scale;
      front.push_back(make_node("DequantizeLinear", names.fresh(bias + "_DequantizeLinear"), {cname, sname}, dq,
                                ws.numel() == 1 ? -1 : 0));
      node_inputs[n.name][i] = dq;
      ++report.biases;
    }
  }
  // The new node order: the front, then each node followed by its outputs' Q/DQ pairs. Every
  // reader of a quantised activation reads its DequantizeLinear's output instead.
  std::vector<Node> nodes = std::move(front);
  for (auto& n : g.nodes) {
    if (auto it = node_inputs.find(n.name); it != node_inputs.end())
      for (const auto& [i, name] : it->second) n.inputs[i] = name;
    nodes.push_back(std::move(n));
    for (const auto& out : nodes.back().outputs)
      if (auto it = after.find(out); it != after.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
  }
  for (auto& n : nodes) {
    if (own_quantizers.count(n.name)) continue;  // they read the float value
    for (auto& in : n.inputs)
      if (auto it = dequantised.find(in); it != dequantised.end()) in = it->second;
  }
  g.nodes = std::move(nodes);
  drop_unused_initializers(g);
  return report;
}

}  // namespace mosaic
