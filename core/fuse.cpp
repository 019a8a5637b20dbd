#include "core/fuse.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/fuse_match.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "operators/attention.hpp"
#include "operators/params.hpp"
#include "operators/eltwise.hpp"
#include "operators/op_context.hpp"

namespace mosaic {
namespace {

/// Number of uses of each value (node inputs and graph outputs).
std::map<std::string, int> use_counts(const Graph& g) {
  std::map<std::string, int> uses;
  for (const auto& n : g.nodes)
    for (const auto& in : n.inputs)
      if (!in.empty()) ++uses[in];
  for (const auto& o : g.outputs) uses[o.name] += 1000;  // never fuse away a graph output
  return uses;
}

/// Zero constant padding on the spatial axes only, as Conv pads (begin..., end...).
bool spatial_zero_pads(const Graph& g, const Node& pad, std::vector<int64_t>* out) {
  if (pad.attr_string("mode", "constant") != "constant") return false;
  std::vector<int64_t> pads;
  if (g.opset < 11) {
    if (pad.attr_float("value", 0.f) != 0.f) return false;
    pads = pad.attr_ints("pads");
  } else {
    if (!pad.has_input(1) || !g.initializers.count(pad.inputs[1])) return false;
    pads = g.initializers.at(pad.inputs[1]).to_i64_vector();
    if (pad.has_input(2)) {
      auto v = g.initializers.find(pad.inputs[2]);
      if (v == g.initializers.end() || (v->second.numel() && v->second.get(0) != 0)) return false;
    }
    if (pad.has_input(3)) return false;
  }
  const size_t r = pads.size() / 2;
  if (r < 3 || pads.size() != 2 * r) return false;
  for (auto p : pads)
    if (p < 0) return false;
  if (pads[0] || pads[1] || pads[r] || pads[r + 1]) return false;  // batch / channel padding
  out->clear();
  for (size_t i = 2; i < r; ++i) out->push_back(pads[i]);
  for (size_t i = 2; i < r; ++i) out->push_back(pads[r + i]);
  return true;
}

/// Whether a value is never negative: the output of Relu, Sigmoid, Softmax, Clip with a
/// constant lower bound >= 0, or of a Conv/Gemm with a fused Relu.
bool non_negative(const Graph& g, const std::map<std::string, size_t>& producer, const std::string& value) {
  auto p = producer.find(value);
  if (p == producer.end()) return false;
  const Node& n = g.nodes[p->second];
  if (n.op_key() == "Relu" || n.op_key() == "Sigmoid" || n.op_key() == "Softmax") return true;
  if (n.attr_string("mosaic.activation", "") == "Relu") return true;
  if (n.op_key() == "Clip") {
    if (g.opset < 11) return n.attr_float("min", -1.f) >= 0.f;
    if (!n.has_input(1)) return false;
    auto lo = g.initializers.find(n.inputs[1]);
    return lo != g.initializers.end() && lo->second.numel() == 1 && lo->second.get(0) >= 0;
  }
  return false;
}

/// A float32 initializer of `numel` elements named by `name`, or nullptr.
const Tensor* f32_constant(const Graph& g, const std::string& name, int64_t numel) {
  auto it = g.initializers.find(name);
  if (name.empty() || it == g.initializers.end() || it->second.dtype() != DType::kF32 || it->second.numel() != numel)
    return nullptr;
  return &it->second;
}

/// Conv -> BatchNormalization (inference, every parameter a constant) as the convolution's own
/// weights and bias: W'[m] = W[m] s[m] and b'[m] = (b[m] - mean[m]) s[m] + B[m], with
/// s = scale / sqrt(var + epsilon), computed in double. The folded weights are new
/// initializers (fuse_graph drops those nothing reads any more). Not where the
/// weights could change at run time (a graph input of that name), with the BatchNormalization's
/// training mode or extra outputs, or after an activation already fused into the Conv.
bool fold_batch_norm(Graph& g, Node& conv, const Node& bn) {
  if (conv.has_attr("mosaic.activation") || conv.inputs.size() < 2 || bn.inputs.size() != 5) return false;
  if (bn.attr_int("training_mode", 0) != 0 || bn.attr_int("spatial", 1) != 1) return false;
  for (size_t i = 1; i < bn.outputs.size(); ++i)
    if (!bn.outputs[i].empty()) return false;
  auto w_it = g.initializers.find(conv.inputs[1]);
  if (w_it == g.initializers.end() || w_it->second.dtype() != DType::kF32 || w_it->second.shape().size() < 3) return false;
  const Tensor& w = w_it->second;
  const int64_t m = w.shape()[0], per = m ? w.numel() / m : 0;
  const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
  const Tensor* b = has_bias ? f32_constant(g, conv.inputs[2], m) : nullptr;
  if (has_bias && !b) return false;
  const Tensor *scale = f32_constant(g, bn.inputs[1], m), *shift = f32_constant(g, bn.inputs[2], m),
               *mean = f32_constant(g, bn.inputs[3], m), *var = f32_constant(g, bn.inputs[4], m);
  if (!scale || !shift || !mean || !var) return false;
  for (const auto& in : g.inputs)  // an initializer that is also a graph input may be fed at run time
    for (const std::string& name : {conv.inputs[1], has_bias ? conv.inputs[2] : std::string(), bn.inputs[1],
                                    bn.inputs[2], bn.inputs[3], bn.inputs[4]})
      if (!name.empty() && in.name == name) return false;
  const double eps = batch_norm_params(bn, {}).epsilon;
  Tensor w2 = Tensor::empty(w.desc()), b2 = Tensor::empty({DType::kF32, {m}});
  for (int64_t o = 0; o < m; ++o) {
    const double k = static_cast<double>(scale->f32()[o]) / std::sqrt(static_cast<double>(var->f32()[o]) + eps);
    for (int64_t i = 0; i < per; ++i) w2.f32()[o * per + i] = static_cast<float>(w.f32()[o * per + i] * k);
    const double bias = b ? b->f32()[o] : 0.0;
    b2.f32()[o] = static_cast<float>((bias - mean->f32()[o]) * k + shift->f32()[o]);
  }
  const std::string w_name = fuse::fresh_name(g, conv.name + ".folded_weight");
  g.value_descs[w_name] = w2.desc();
  g.initializers[w_name] = std::move(w2);
  const std::string b_name = fuse::fresh_name(g, conv.name + ".folded_bias");
  g.value_descs[b_name] = b2.desc();
  g.initializers[b_name] = std::move(b2);
  conv.inputs.resize(3);
  conv.inputs[1] = w_name;
  conv.inputs[2] = b_name;
  return true;
}

}  // namespace

bool fold_pad_into_pool(const Graph& g, const Node& pad, Node& pool, bool input_non_negative) {
  if (pool.attr_string("auto_pad", "NOTSET") != "NOTSET" || pool.attr_int("ceil_mode", 0) != 0) return false;
  const bool max = pool.op_key() == "MaxPool";
  if (max && (!input_non_negative || pool.outputs.size() > 1)) return false;
  std::vector<int64_t> extra;
  if (!spatial_zero_pads(g, pad, &extra)) return false;
  const std::vector<int64_t> kernel = pool.attr_ints("kernel_shape");
  std::vector<int64_t> pads = pool.attr_ints("pads", std::vector<int64_t>(extra.size(), 0));
  if (pads.size() != extra.size() || kernel.size() * 2 != pads.size()) return false;
  const bool own_pads = std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v != 0; });
  if (!max && own_pads && pool.attr_int("count_include_pad", 0) == 0) return false;
  const std::vector<int64_t> dil = pool.attr_ints("dilations", std::vector<int64_t>(kernel.size(), 1));
  for (size_t i = 0; i < pads.size(); ++i) {
    pads[i] += extra[i];
    const size_t axis = i % kernel.size();
    if (max && pads[i] >= (kernel[axis] - 1) * (axis < dil.size() ? dil[axis] : 1) + 1) return false;
  }
  pool.attrs["pads"] = Attribute::of_ints(pads);
  if (!max) pool.attrs["count_include_pad"] = Attribute::of_int(1);
  return true;
}

std::function<bool(const Node&)> where_kernel(std::vector<Placement> placements, const KernelRegistry& registry,
                                             std::string op) {
  return [placements = std::move(placements), &registry, op = std::move(op)](const Node& n) {
    return std::all_of(placements.begin(), placements.end(),
                       [&](const Placement& p) { return registry.has_kernel(p.backend_for(n), op); });
  };
}

/// The reference backend, which runs graphs as written.
constexpr const char* kOracleBackend = "naive";

std::function<bool(const Graph&, const Node&)> where_accepted(std::vector<Placement> placements,
                                                              const KernelRegistry& registry) {
  return [placements = std::move(placements), &registry](const Graph& g, const Node& n) {
    KernelContext ctx;
    ctx.node = &n;
    ctx.opset = g.opset;
    for (const auto& in : n.inputs) {
      const TensorDesc* d = in.empty() ? nullptr : fuse::desc_of(g, in);
      if (!in.empty() && !d) return false;
      auto init = in.empty() ? g.initializers.end() : g.initializers.find(in);
      ctx.inputs.push_back(d ? *d : TensorDesc{});
      ctx.input_present.push_back(!in.empty());
      ctx.constants.push_back(init == g.initializers.end() ? nullptr : &init->second);
    }
    for (const auto& out : n.outputs) {
      const TensorDesc* d = out.empty() ? nullptr : fuse::desc_of(g, out);
      if (!out.empty() && !d) return false;
      ctx.outputs.push_back(d ? *d : TensorDesc{});
      ctx.output_present.push_back(!out.empty());
    }
    return std::all_of(placements.begin(), placements.end(),
                       [&](const Placement& p) { return registry.query(p.backend_for(n), ctx).accepted(); });
  };
}

int fold_batch_norms(Graph& g) {
  int folded = 0;
  for (bool changed = true; changed;) {
    changed = false;
    const auto uses = use_counts(g);
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer[o] = i;
    for (size_t bi = 0; bi < g.nodes.size() && !changed; ++bi) {
      const Node& bn = g.nodes[bi];
      if (bn.op_key() != "BatchNormalization" || bn.inputs.empty()) continue;
      auto p = producer.find(bn.inputs[0]);
      auto u = uses.find(bn.inputs[0]);
      if (p == producer.end() || u == uses.end() || u->second != 1) continue;
      Node& conv = g.nodes[p->second];
      if (conv.op_key() != "Conv" || conv.outputs.size() != 1 || !fold_batch_norm(g, conv, bn)) continue;
      g.value_descs.erase(conv.outputs[0]);
      conv.outputs[0] = bn.outputs[0];
      g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(bi));
      ++folded;
      changed = true;
    }
  }
  if (folded) drop_unused_initializers(g);
  return folded;
}

FuseOptions fuse_options_for(const std::vector<Placement>& placements, const KernelRegistry& registry,
                             bool training) {
  FuseOptions fo;
  fo.activations = !training;
  fo.batch_norm = !training;
  fo.pool_before_relu = training;
  fo.swish = where_kernel(placements, registry, "Swish");
  if (!training) {
    fo.attention = where_kernel(placements, registry, kAttentionOp);
    fo.rms_norm = where_kernel(placements, registry, "RMSNormalization");
    fo.linear = where_kernel(placements, registry, "Gemm");
    // Not on the oracle: it computes a QDQ model as written (the rewrite is not exact, and
    // every other backend's integer run is judged against that).
    auto accepted = where_accepted(placements, registry);
    fo.integer = [placements, accepted](const Graph& g, const Node& n) {
      for (const auto& p : placements)
        if (p.backend_for(n) == kOracleBackend) return false;
      return accepted(g, n);
    };
    fo.oracle = &registry;
  }
  fo.apart = apart_in(placements);
  return fo;
}

FuseOptions fuse_options_for(const Placement& placement, const KernelRegistry& registry, bool training) {
  return fuse_options_for(std::vector<Placement>{placement}, registry, training);
}

std::function<bool(const Node&, const Node&)> apart_in(std::vector<Placement> placements) {
  // Only a consumer with a rule of its own stays apart: a fused node follows its first named
  // part (Placement::backend_for), so `@conv1=onednn,*=naive` still fuses conv1+relu1 on onednn.
  return [placements = std::move(placements)](const Node& producer, const Node& consumer) {
    for (const auto& p : placements)
      if (p.places_explicitly(consumer) && p.backend_for(producer) != p.backend_for(consumer)) return true;
    return false;
  };
}

FuseReport fuse_graph(Graph& g, const FuseOptions& options) {
  FuseReport report;
  if (options.layer_norm) fuse_layer_norms(g, report);
  fuse_rms_norms(g, options.rms_norm, report);
  fuse_swishes(g, options.swish, report);
  if (options.gelu) fuse_gelus(g, report);
  fuse_attention(g, options.attention, report);
  fuse_linears(g, options.linear, report);
  if (options.pool_before_relu) reorder_relu_max_pools(g, options.apart, report);
  bool folded_weights = false;  // a BatchNormalization folded: the weights it replaced may be dead
  bool changed = true;
  while (changed) {
    changed = false;
    auto uses = use_counts(g);
    std::map<std::string, size_t> producer;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& o : g.nodes[i].outputs)
        if (!o.empty()) producer[o] = i;
    for (size_t ci = 0; ci < g.nodes.size() && !changed; ++ci) {
      Node& consumer = g.nodes[ci];
      if (consumer.inputs.empty() || consumer.inputs[0].empty()) continue;
      auto p = producer.find(consumer.inputs[0]);
      if (p == producer.end() || uses[consumer.inputs[0]] != 1) continue;
      Node& prod = g.nodes[p->second];
      if (options.apart && options.apart(prod, consumer)) continue;
      // Pad -> Conv; Pad -> MaxPool (inference: a tie between a padded zero and a real one
      // would move a gradient) / AveragePool. The consumer then reads the Pad's input.
      bool folded = false;
      if (prod.op_key() == "Pad" && consumer.op_key() == "Conv" && consumer.attr_string("auto_pad", "NOTSET") == "NOTSET") {
        std::vector<int64_t> extra;
        if (!spatial_zero_pads(g, prod, &extra)) continue;
        std::vector<int64_t> pads = consumer.attr_ints("pads", std::vector<int64_t>(extra.size(), 0));
        if (pads.size() != extra.size()) continue;
        for (size_t i = 0; i < pads.size(); ++i) pads[i] += extra[i];
        consumer.attrs["pads"] = Attribute::of_ints(pads);
        folded = true;
      } else if (prod.op_key() == "Pad" &&
                 (consumer.op_key() == "AveragePool" || (consumer.op_key() == "MaxPool" && options.activations))) {
        folded = fold_pad_into_pool(g, prod, consumer, non_negative(g, producer, prod.inputs[0]));
      }
      // Conv -> BatchNormalization (inference): the normalisation folds into the weights.
      if (options.batch_norm && prod.op_key() == "Conv" && consumer.op_key() == "BatchNormalization" &&
          fold_batch_norm(g, prod, consumer)) {
        folded_weights = true;
        g.value_descs.erase(prod.outputs[0]);
        prod.outputs[0] = consumer.outputs[0];
        prod.name += "+" + consumer.name;
        g.nodes.erase(g.nodes.begin() + static_cast<long>(ci));
        changed = true;
        continue;
      }
      if (folded) {
        g.value_descs.erase(consumer.inputs[0]);
        consumer.inputs[0] = prod.inputs[0];
        consumer.name = prod.name + "+" + consumer.name;
        g.nodes.erase(g.nodes.begin() + static_cast<long>(p->second));
        changed = true;
        continue;
      }
      // Conv/Gemm -> an activation the element-wise table marks fusable, with its attributes
      // resolved (Clip's bounds must be constants).
      const std::optional<UnaryOp> act = unary_op_of(consumer.op_key());
      if (!act || !unary_info(*act).fusable || !options.activations ||
          (prod.op_key() != "Conv" && prod.op_key() != "Gemm") || prod.has_attr("mosaic.activation"))
        continue;
      OpContext ctx;
      ctx.node = &consumer;
      ctx.opset = g.opset;
      bool constant_inputs = true;
      for (size_t i = 0; i < consumer.inputs.size(); ++i) {
        const bool present = !consumer.inputs[i].empty();
        auto c = present ? g.initializers.find(consumer.inputs[i]) : g.initializers.end();
        if (i > 0 && present && c == g.initializers.end()) constant_inputs = false;
        ctx.input_present.push_back(present);
        ctx.constants.push_back(c != g.initializers.end() ? &c->second : nullptr);
      }
      if (!constant_inputs) continue;
      const UnaryArgs args = unary_args(*act, ctx);
      prod.attrs["mosaic.alpha"] = Attribute::of_float(static_cast<float>(args.alpha));
      prod.attrs["mosaic.beta"] = Attribute::of_float(static_cast<float>(args.beta));
      prod.attrs["mosaic.gamma"] = Attribute::of_float(static_cast<float>(args.gamma));
      prod.attrs["mosaic.min"] = Attribute::of_float(static_cast<float>(args.lo));
      prod.attrs["mosaic.max"] = Attribute::of_float(static_cast<float>(args.hi));
      prod.attrs["mosaic.tanh"] = Attribute::of_int(args.tanh ? 1 : 0);
      prod.attrs["mosaic.activation"] = Attribute::of_string(consumer.op_type);
      g.value_descs.erase(prod.outputs[0]);
      prod.outputs[0] = consumer.outputs[0];
      // A node fused before (a Linear layer's Gemm, a Swish) is reported once, by the name it
      // ends with.
      report.fused.erase(std::remove(report.fused.begin(), report.fused.end(), consumer.name), report.fused.end());
      const auto before = std::find(report.fused.begin(), report.fused.end(), prod.name);
      prod.name = prod.name + "+" + consumer.name;
      if (before != report.fused.end()) *before = prod.name;
      else report.fused.push_back(prod.name);
      g.nodes.erase(g.nodes.begin() + static_cast<long>(ci));
      changed = true;
    }
  }
  // QDQ convolutions as integer ones, after the padding folded into them; their float
  // weights are then dead too.
  const size_t fused_before = report.fused.size();
  fuse_qdq_convs(g, options.integer, report);
  fuse_qdq_codes(g, options.integer, options.oracle, report);
  fuse_dynamic_products(g, options.integer, report);
  folded_weights = folded_weights || report.fused.size() > fused_before;
  // The plan would count weights nothing reads (the convolutions' and BatchNormalizations'
  // parameters a fold replaced, the float weights of integer convolutions); nothing else
  // fuse_graph does leaves weights behind.
  if (folded_weights) drop_unused_initializers(g);
  for (const auto& n : g.nodes)
    if (n.name.find('+') != std::string::npos &&
        std::find(report.fused.begin(), report.fused.end(), n.name) == report.fused.end())
      report.fused.push_back(n.name);
  return report;
}

}  // namespace mosaic
