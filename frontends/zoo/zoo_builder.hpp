// The zoo's graph builder (frontends/zoo/zoo.cpp, frontends/zoo/zoo_sequence.cpp): nodes with named
// outputs and seeded PyTorch-style initialisation.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
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
    return push(conv_node(name, {x, name + ".weight", name + ".bias"}, k, stride, pad));
  }
  /// A convolution without bias, its weights as torchvision's ResNets initialise them
  /// (kaiming_normal_, fan_out, ReLU gain: normal with standard deviation sqrt(2 / fan_out)),
  /// which keeps activations near unit scale through a deep network.
  std::string conv_he(const std::string& x, const std::string& name, int64_t cin, int64_t cout, int64_t k,
                      int64_t stride, int64_t pad) {
    Tensor t = Tensor::empty({DType::kF32, {cout, cin, k, k}});
    std::normal_distribution<float> dist(0.f, static_cast<float>(std::sqrt(2.0 / static_cast<double>(cout * k * k))));
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng_);
    g_.initializers[name + ".weight"] = std::move(t);
    return push(conv_node(name, {x, name + ".weight"}, k, stride, pad));
  }
  std::string relu(const std::string& x, const std::string& name) { return push(node("Relu", name, {x})); }
  std::string zero_pad(const std::string& x, const std::string& name, int64_t p) {
    const std::string pads = name + ".pads";
    g_.initializers[pads] = Tensor::from_i64({8}, {0, 0, p, p, 0, 0, p, p});
    Node n = node("Pad", name, {x, pads});
    n.attrs["mode"] = Attribute::of_string("constant");
    return push(std::move(n));
  }
  std::string max_pool(const std::string& x, const std::string& name, int64_t k, int64_t s, int64_t pad = 0) {
    Node n = node("MaxPool", name, {x});
    n.attrs["kernel_shape"] = Attribute::of_ints({k, k});
    n.attrs["strides"] = Attribute::of_ints({s, s});
    if (pad) n.attrs["pads"] = Attribute::of_ints({pad, pad, pad, pad});
    return push(std::move(n));
  }
  /// BatchNormalization over `c` channels as PyTorch initialises it: scale 1, shift 0, running
  /// mean 0 and variance 1 (epsilon 1e-5, PyTorch's momentum 0.1).
  std::string batch_norm(const std::string& x, const std::string& name, int64_t c) {
    const std::vector<std::pair<std::string, float>> params = {
        {".weight", 1.f}, {".bias", 0.f}, {".running_mean", 0.f}, {".running_var", 1.f}};
    std::vector<std::string> inputs{x};
    for (const auto& [suffix, value] : params) {
      Tensor t = Tensor::empty({DType::kF32, {c}});
      std::fill(t.f32(), t.f32() + c, value);
      g_.initializers[name + suffix] = std::move(t);
      inputs.push_back(name + suffix);
    }
    Node n = node("BatchNormalization", name, std::move(inputs));
    n.attrs["epsilon"] = Attribute::of_float(1e-5f);
    n.attrs["momentum"] = Attribute::of_float(0.9f);
    return push(std::move(n));
  }
  std::string add(const std::string& a, const std::string& b, const std::string& name) {
    return push(node("Add", name, {a, b}));
  }
  std::string global_avg_pool(const std::string& x, const std::string& name) {
    return push(node("GlobalAveragePool", name, {x}));
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
  /// Names the last node's output `out`, the graph's output of [batch, per_row...] float32,
  /// declared as an exporter declares it (the batch symbolic).
  Graph finish(const std::string& out, const Shape& per_row) {
    g_.nodes.back().outputs[0] = out;
    ValueInfo v;
    v.name = out;
    v.dims = {-1};
    v.dims.insert(v.dims.end(), per_row.begin(), per_row.end());
    v.dim_params.assign(v.dims.size(), "");
    v.dim_params[0] = "batch";
    v.has_shape = true;
    g_.outputs.push_back(v);
    return std::move(g_);
  }

 protected:
  /// A square k x k convolution with the same stride and pad on both axes.
  Node conv_node(const std::string& name, std::vector<std::string> inputs, int64_t k, int64_t stride, int64_t pad) {
    Node n = node("Conv", name, std::move(inputs));
    n.attrs["kernel_shape"] = Attribute::of_ints({k, k});
    n.attrs["strides"] = Attribute::of_ints({stride, stride});
    n.attrs["pads"] = Attribute::of_ints({pad, pad, pad, pad});
    return n;
  }
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
