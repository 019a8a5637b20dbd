#include "examples/zoo.hpp"

#include <cmath>
#include <random>

namespace mosaic {
namespace {

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
  Graph finish(const std::string& out) {
    g_.nodes.back().outputs[0] = out;
    ValueInfo v;
    v.name = out;
    g_.outputs.push_back(v);
    return std::move(g_);
  }

 private:
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

/// Seed 000's AlexNet for CIFAR-10 (78,330,250 parameters).
Graph alexnet_cifar(uint64_t seed) {
  Builder b("alexnet-cifar", seed);
  std::string x = b.input("input", {-1, 3, 32, 32});
  x = b.relu(b.conv(x, "conv1", 3, 192, 3, 2, 0), "relu1");
  x = b.max_pool(b.zero_pad(x, "pad1", 1), "pool1", 3, 2);
  x = b.relu(b.conv(x, "conv2", 192, 384, 3, 1, 0), "relu2");
  x = b.max_pool(b.zero_pad(x, "pad2", 1), "pool2", 2, 2);
  x = b.zero_pad(b.relu(b.conv(x, "conv3", 384, 256, 3, 1, 0), "relu3"), "pad3", 1);
  x = b.zero_pad(b.relu(b.conv(x, "conv4", 256, 256, 3, 1, 0), "relu4"), "pad4", 1);
  x = b.zero_pad(b.relu(b.conv(x, "conv5", 256, 256, 3, 1, 0), "relu5"), "pad5", 1);
  x = b.flatten(b.max_pool(x, "pool5", 2, 2), "flatten");
  x = b.relu(b.linear(x, "fc1", 1024, 8192), "relu6");
  x = b.relu(b.linear(x, "fc2", 8192, 8192), "relu7");
  b.linear(x, "fc3", 8192, 10);
  return b.finish("logits");
}

/// Seed 000's VGG16 for CIFAR-100 (8,735,652 parameters).
Graph vgg16_cifar(uint64_t seed) {
  Builder b("vgg16-cifar", seed);
  std::string x = b.input("input", {-1, 3, 32, 32});
  const std::vector<std::vector<int64_t>> blocks = {{64, 64}, {128, 128}, {256, 256, 256}, {512, 512, 512}};
  int64_t cin = 3;
  int layer = 0;
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    for (int64_t cout : blocks[bi]) {
      const std::string id = std::to_string(++layer);
      x = b.zero_pad(b.relu(b.conv(x, "conv" + id, cin, cout, 3, 1, 0), "relu" + id), "pad" + id, 1);
      cin = cout;
    }
    x = b.max_pool(x, "pool" + std::to_string(bi + 1), 2, 2);
  }
  x = b.flatten(x, "flatten");
  x = b.relu(b.linear(x, "fc1", 2048, 512), "relu_fc1");
  b.linear(x, "fc2", 512, 100);
  return b.finish("logits");
}

/// A small CNN for 28x28 grey images (Fashion-MNIST): two conv blocks and two linear layers.
Graph fmnist_cnn(uint64_t seed) {
  Builder b("fmnist-cnn", seed);
  std::string x = b.input("input", {-1, 1, 28, 28});
  x = b.max_pool(b.relu(b.conv(x, "conv1", 1, 32, 3, 1, 1), "relu1"), "pool1", 2, 2);
  x = b.max_pool(b.relu(b.conv(x, "conv2", 32, 64, 3, 1, 1), "relu2"), "pool2", 2, 2);
  x = b.relu(b.linear(b.flatten(x, "flatten"), "fc1", 64 * 7 * 7, 128), "relu3");
  b.linear(x, "fc2", 128, 10);
  return b.finish("logits");
}

}  // namespace

std::vector<std::string> zoo_names() { return {"alexnet-cifar", "vgg16-cifar", "fmnist-cnn"}; }

std::string zoo_description(const std::string& name) {
  if (name == "alexnet-cifar") return "AlexNet for CIFAR-10, 3x32x32 -> 10 (78,330,250 parameters)";
  if (name == "vgg16-cifar") return "VGG16 for CIFAR-100, 3x32x32 -> 100 (8,735,652 parameters)";
  if (name == "fmnist-cnn") return "small CNN for Fashion-MNIST, 1x28x28 -> 10 (421,642 parameters)";
  return "";
}

Expected<Graph> build_zoo_model(const std::string& name, uint64_t seed) {
  if (name == "alexnet-cifar") return alexnet_cifar(seed);
  if (name == "vgg16-cifar") return vgg16_cifar(seed);
  if (name == "fmnist-cnn") return fmnist_cnn(seed);
  std::string known;
  for (const auto& n : zoo_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::not_found("unknown zoo model '" + name + "' (known: " + known + ")");
}

}  // namespace mosaic
