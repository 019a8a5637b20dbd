// The zoo's graph builder (frontends/zoo/zoo.cpp, frontends/zoo/zoo_sequence.cpp): nodes with named
// outputs and seeded PyTorch-style initialisation.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace mosaic::zoo_detail {

/// Appends nodes with auto-named outputs and PyTorch-default initialisation
/// (uniform in +-1/sqrt(fan_in) for weights and biases).
class Builder {
 public:
  Builder(std::string name, uint64_t seed) : rng_(seed) {
    g_.name = std::move(name);
    g_.opset = 13;
  }
  std::string input(const std::string& name, Shape dims) {
    ValueInfo v;
    v.name = name;
    v.dims = std::move(dims);
    v.dim_params.assign(v.dims.size(), "");
    v.dim_params[0] = "batch";
    v.has_shape = true;
    g_.inputs.push_back(v);
    return name;
  }
  std::string conv(const std::string& x, const std::string& name, int64_t cin, int64_t cout, int64_t k,
                   int64_t stride, int64_t pad) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(cin * k * k));
    add_param(name + ".weight", {cout, cin, k, k}, bound);
    add_param(name + ".bias", {cout}, bound);
    Node n = node("Conv", name, {x, name + ".weight", name + ".bias"});
    n.attrs["kernel_shape"] = Attribute::of_ints({k, k});
    n.attrs["strides"] = Attribute::of_ints({stride, stride});
    n.attrs["pads"] = Attribute::of_ints({pad, pad, pad, pad});
    return push(std::move(n));
  }
  std::string relu(const std::string& x, const std::string& name) { return push(node("Relu", name, {x})); }
  std::string zero_pad(const std::string& x, const std::string& name, int64_t p) {
    const std::string pads = name + ".pads";
    g_.initializers[pads] = Tensor::from_i64({8}, {0, 0, p, p, 0, 0, p, p});
    Node n = node("Pad", name, {x, pads});
    n.attrs["mode"] = Attribute::of_string("constant");
    return push(std::move(n));
  }
  std::string max_pool(const std::string& x, const std::string& name, int64_t k, int64_t s) {
    Node n = node("MaxPool", name, {x});
    n.attrs["kernel_shape"] = Attribute::of_ints({k, k});
    n.attrs["strides"] = Attribute::of_ints({s, s});
    return push(std::move(n));
  }
  std::string flatten(const std::string& x, const std::string& name) {
    Node n = node("Flatten", name, {x});
    n.attrs["axis"] = Attribute::of_int(1);
    return push(std::move(n));
  }
  std::string linear(const std::string& x, const std::string& name, int64_t in, int64_t out) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    add_param(name + ".weight", {out, in}, bound);
    add_param(name + ".bias", {out}, bound);
    Node n = node("Gemm", name, {x, name + ".weight", name + ".bias"});
    n.attrs["transB"] = Attribute::of_int(1);
    return push(std::move(n));
  }
  /// A parameter uniform in +-bound (PyTorch's default for fan-in layers).
  void uniform(const std::string& name, const Shape& shape, double bound) { add_param(name, shape, bound); }
  Graph& graph() { return g_; }
  Graph finish(const std::string& out) {
    g_.nodes.back().outputs[0] = out;
    ValueInfo v;
    v.name = out;
    g_.outputs.push_back(v);
    return std::move(g_);
  }

 protected:
  Node node(const std::string& op, const std::string& name, std::vector<std::string> inputs) {
    Node n;
    n.op_type = op;
    n.name = name;
    n.inputs = std::move(inputs);
    n.outputs = {name + ".out"};
    return n;
  }
  std::string push(Node n) {
    std::string out = n.outputs[0];
    g_.nodes.push_back(std::move(n));
    return out;
  }
  void add_param(const std::string& name, const Shape& shape, double bound) {
    Tensor t = Tensor::empty({DType::kF32, shape});
    std::uniform_real_distribution<float> dist(static_cast<float>(-bound), static_cast<float>(bound));
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng_);
    g_.initializers[name] = std::move(t);
  }
  Graph g_;
  std::mt19937_64 rng_;
};

}  // namespace mosaic::zoo_detail
