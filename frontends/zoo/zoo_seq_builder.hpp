// The sequence models' graph builder (frontends/zoo/zoo_sequence.cpp, zoo_decoder.cpp): ids,
// BERT-style initialisation (weights N(0, 0.02), biases 0, norm scales 1), constants as
// exporters write them, and the transformer's parts as PyTorch's exporter writes them at
// opset 17.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "frontends/zoo/zoo_builder.hpp"

namespace mosaic::zoo_detail {

class SeqBuilder : public Builder {
 public:
  SeqBuilder(std::string name, uint64_t seed) : Builder(std::move(name), seed) { g_.opset = 17; }

  std::string ids(const std::string& name, int64_t seq) {
    input(name, {-1, seq});
    g_.inputs.back().dtype = DType::kI64;
    return name;
  }
  virtual ~SeqBuilder() = default;
  /// A parameter N(0, std_dev), drawn from the builder's one generator in order.
  virtual std::string normal(const std::string& name, const Shape& shape, double std_dev = 0.02) {
    Tensor t = Tensor::empty({DType::kF32, shape});
    std::normal_distribution<float> d(0.f, static_cast<float>(std_dev));
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = d(rng_);
    g_.initializers[name] = std::move(t);
    return name;
  }
  std::string fill(const std::string& name, const Shape& shape, float v) {
    Tensor t = Tensor::empty({DType::kF32, shape});
    std::fill(t.f32(), t.f32() + t.numel(), v);
    g_.initializers[name] = std::move(t);
    return name;
  }
  /// A constant (a Constant node, as exporters write 1.0 or sqrt(d)): folded at load, never
  /// trained.
  std::string constant(const std::string& name, Tensor value) {
    Node n = node("Constant", name, {});
    n.outputs = {name};
    n.attrs["value"] = Attribute::of_tensor(std::move(value));
    return push(std::move(n));
  }
  std::string scalar(const std::string& name, float v) { return constant(name, Tensor::from_f32({}, {v})); }
  std::string op(const std::string& type, const std::string& name, std::vector<std::string> in,
                 std::map<std::string, Attribute> attrs = {}) {
    Node n = node(type, name, std::move(in));
    n.attrs = std::move(attrs);
    return push(std::move(n));
  }
  std::string reshape(const std::string& x, const std::string& name, std::vector<int64_t> shape) {
    g_.initializers[name + ".shape"] = Tensor::from_i64({static_cast<int64_t>(shape.size())}, shape);
    return op("Reshape", name, {x, name + ".shape"});
  }
  std::string transpose(const std::string& x, const std::string& name, std::vector<int64_t> perm) {
    return op("Transpose", name, {x}, {{"perm", Attribute::of_ints(std::move(perm))}});
  }
  /// x [.., in] W [in, out] + b, as PyTorch exports nn.Linear on 3-D inputs.
  std::string dense(const std::string& x, const std::string& name, int64_t in, int64_t out) {
    const std::string y = op("MatMul", name + ".matmul", {x, normal(name + ".weight", {in, out})});
    return op("Add", name, {y, fill(name + ".bias", {out}, 0.f)});
  }
  std::string layer_norm(const std::string& x, const std::string& name, int64_t h) {
    return op("LayerNormalization", name,
              {x, fill(name + ".weight", {h}, 1.f), fill(name + ".bias", {h}, 0.f)},
              {{"axis", Attribute::of_int(-1)}, {"epsilon", Attribute::of_float(1e-5f)}});
  }
  /// GELU as torch.nn.functional.gelu exports below opset 20: x * 0.5 * (1 + erf(x / sqrt 2)).
  std::string gelu(const std::string& x, const std::string& name) {
    const std::string u = op("Div", name + ".div", {x, scalar(name + ".sqrt2", 1.41421356f)});
    const std::string e = op("Erf", name + ".erf", {u});
    const std::string a = op("Add", name + ".add", {e, scalar(name + ".one", 1.f)});
    const std::string m = op("Mul", name + ".mul", {x, a});
    return op("Mul", name, {m, scalar(name + ".half", 0.5f)});
  }
  /// Multi-head self-attention: projections, heads split by Reshape/Transpose, QK^T scaled,
  /// an optional additive mask, Softmax, V, heads merged, the output projection.
  std::string attention(const std::string& x, const std::string& name, int64_t h, int64_t heads,
                        const std::string& mask = "") {
    const int64_t d = h / heads;
    auto split = [&](const std::string& which, std::vector<int64_t> perm) {
      const std::string p = dense(x, name + "." + which, h, h);
      return transpose(reshape(p, name + "." + which + "_heads", {0, 0, heads, d}), name + "." + which + "_t", perm);
    };
    const std::string q = split("query", {0, 2, 1, 3}), k = split("key", {0, 2, 3, 1}), v = split("value", {0, 2, 1, 3});
    std::string s = op("MatMul", name + ".scores", {q, k});
    s = op("Mul", name + ".scale", {s, scalar(name + ".inv_sqrt_d", 1.f / std::sqrt(static_cast<float>(d)))});
    if (!mask.empty()) s = op("Add", name + ".mask", {s, mask});
    const std::string p = op("Softmax", name + ".softmax", {s}, {{"axis", Attribute::of_int(-1)}});
    std::string c = op("MatMul", name + ".context", {p, v});
    c = reshape(transpose(c, name + ".context_t", {0, 2, 1, 3}), name + ".merge", {0, 0, h});
    return dense(c, name + ".output", h, h);
  }
  std::string mlp(const std::string& x, const std::string& name, int64_t h, int64_t ff) {
    return dense(gelu(dense(x, name + ".fc1", h, ff), name + ".gelu"), name + ".fc2", ff, h);
  }
  /// Logits over the vocabulary with the word-embedding table as the weight (tied):
  /// x [B, T, H] -> [B*T, H] Gemm(transB) -> [B, T, V].
  std::string tied_head(const std::string& x, const std::string& name, const std::string& table, int64_t seq,
                        int64_t h, int64_t vocab) {
    const std::string flat = reshape(x, name + ".flat", {-1, h});
    const std::string y = op("Gemm", name + ".decoder", {flat, table, fill(name + ".bias", {vocab}, 0.f)},
                             {{"transB", Attribute::of_int(1)}});
    return reshape(y, name, {-1, seq, vocab});
  }
};

}  // namespace mosaic::zoo_detail
