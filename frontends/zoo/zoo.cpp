#include "frontends/zoo/zoo.hpp"

#include "frontends/zoo/zoo_builder.hpp"
#include "frontends/zoo/zoo_decoder.hpp"
#include "frontends/zoo/zoo_sequence.hpp"

namespace mosaic {
namespace {

using zoo_detail::Builder;

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
  return b.finish("logits", {10});
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
  return b.finish("logits", {100});
}

/// A small CNN for 28x28 grey images (Fashion-MNIST): two conv blocks and two linear layers.
Graph fmnist_cnn(uint64_t seed) {
  Builder b("fmnist-cnn", seed);
  std::string x = b.input("input", {-1, 1, 28, 28});
  x = b.max_pool(b.relu(b.conv(x, "conv1", 1, 32, 3, 1, 1), "relu1"), "pool1", 2, 2);
  x = b.max_pool(b.relu(b.conv(x, "conv2", 32, 64, 3, 1, 1), "relu2"), "pool2", 2, 2);
  x = b.relu(b.linear(b.flatten(x, "flatten"), "fc1", 64 * 7 * 7, 128), "relu3");
  b.linear(x, "fc2", 128, 10);
  return b.finish("logits", {10});
}

/// torchvision's ResNet-50 (v1.5: the stride on each bottleneck's 3x3 convolution) for
/// 3x224x224 ImageNet images, initialised as torchvision does: convolutions kaiming-normal
/// (fan_out), BatchNormalization scale 1, shift 0, running statistics 0 and 1, the classifier
/// uniform in +-1/sqrt(fan_in).
Graph resnet50(uint64_t seed) {
  Builder b("resnet50", seed);
  std::string x = b.input("input", {-1, 3, 224, 224});
  x = b.relu(b.batch_norm(b.conv_he(x, "conv1", 3, 64, 7, 2, 3), "bn1", 64), "relu");
  x = b.max_pool(x, "maxpool", 3, 2, 1);
  int64_t cin = 64;
  const int64_t blocks[4] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; ++layer) {
    const int64_t width = int64_t{64} << layer, cout = width * 4;
    for (int64_t i = 0; i < blocks[layer]; ++i) {
      const std::string id = "layer" + std::to_string(layer + 1) + "." + std::to_string(i);
      const int64_t stride = i == 0 && layer > 0 ? 2 : 1;
      std::string y = b.relu(b.batch_norm(b.conv_he(x, id + ".conv1", cin, width, 1, 1, 0), id + ".bn1", width),
                             id + ".relu1");
      y = b.relu(b.batch_norm(b.conv_he(y, id + ".conv2", width, width, 3, stride, 1), id + ".bn2", width),
                 id + ".relu2");
      y = b.batch_norm(b.conv_he(y, id + ".conv3", width, cout, 1, 1, 0), id + ".bn3", cout);
      std::string shortcut = x;
      if (i == 0)
        shortcut = b.batch_norm(b.conv_he(x, id + ".downsample.0", cin, cout, 1, stride, 0), id + ".downsample.1", cout);
      x = b.relu(b.add(y, shortcut, id + ".add"), id + ".relu3");
      cin = cout;
    }
  }
  x = b.flatten(b.global_avg_pool(x, "avgpool"), "flatten");
  b.linear(x, "fc", 2048, 1000);
  return b.finish("logits", {1000});
}

/// Seed 004's data-parallel study (its code's PyTorch models, 1x28x28 MNIST -> 10): the
/// small CNN, one 3x3 convolution (32, padding 1), a 2x2 max pool and two linear layers
/// (402,442 parameters, as the seed says).
Graph dp_mnist_small(uint64_t seed) {
  Builder b("dp-mnist-small", seed);
  std::string x = b.input("input", {-1, 1, 28, 28});
  x = b.max_pool(b.relu(b.conv(x, "conv1", 1, 32, 3, 1, 1), "relu1"), "pool1", 2, 2);
  x = b.relu(b.linear(b.flatten(x, "flatten"), "fc1", 32 * 14 * 14, 64), "relu2");
  b.linear(x, "fc2", 64, 10);
  return b.finish("logits", {10});
}

/// Seed 004's large CNN as its code defines it: three 3x3 convolutions (128, 256, 512,
/// padding 1) each with a 2x2 max pool, then 4608 -> 512 -> 512 -> 10 (4,104,202 parameters;
/// the seed's text says 2,636,554, which neither of its code's models has: docs/seeds.md).
Graph dp_mnist_large(uint64_t seed) {
  Builder b("dp-mnist-large", seed);
  std::string x = b.input("input", {-1, 1, 28, 28});
  int64_t cin = 1;
  for (int i = 0; i < 3; ++i) {
    const std::string id = std::to_string(i + 1);
    const int64_t cout = int64_t{128} << i;
    x = b.max_pool(b.relu(b.conv(x, "conv" + id, cin, cout, 3, 1, 1), "relu" + id), "pool" + id, 2, 2);
    cin = cout;
  }
  x = b.relu(b.linear(b.flatten(x, "flatten"), "fc1", 512 * 3 * 3, 512), "relu4");
  x = b.relu(b.linear(x, "fc2", 512, 512), "relu5");
  b.linear(x, "fc3", 512, 10);
  return b.finish("logits", {10});
}

/// Every zoo model, in the order `mosaic export` lists them: the seeds' vision networks, then
/// the sequence models and decoders.
std::vector<zoo_detail::ZooEntry> entries() {
  std::vector<zoo_detail::ZooEntry> all = {
      {"alexnet-cifar", "AlexNet for CIFAR-10, 3x32x32 -> 10 (78,330,250 parameters)", alexnet_cifar},
      {"vgg16-cifar", "VGG16 for CIFAR-100, 3x32x32 -> 100 (8,735,652 parameters)", vgg16_cifar},
      {"fmnist-cnn", "small CNN for Fashion-MNIST, 1x28x28 -> 10 (421,642 parameters)", fmnist_cnn},
      {"resnet50",
       "torchvision's ResNet-50 for ImageNet, 3x224x224 -> 1000 (25,557,032 parameters and 53,120 running "
       "statistics, as initialised)",
       resnet50},
      {"dp-mnist-small", "seed 004's small CNN for MNIST, 1x28x28 -> 10 (402,442 parameters)", dp_mnist_small},
      {"dp-mnist-large", "seed 004's large CNN for MNIST as its code defines it, 1x28x28 -> 10 (4,104,202 parameters)",
       dp_mnist_large},
  };
  for (auto& e : zoo_detail::sequence_zoo()) all.push_back(std::move(e));
  for (auto& e : zoo_detail::decoder_zoo()) all.push_back(std::move(e));
  return all;
}

}  // namespace

std::vector<std::string> zoo_names() {
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.name);
  return names;
}

std::string zoo_description(const std::string& name) {
  for (const auto& e : entries())
    if (e.name == name) return e.description;
  return "";
}

Expected<Graph> build_zoo_model(const std::string& name, uint64_t seed) {
  for (const auto& e : entries())
    if (e.name == name) return e.build(seed);
  std::string known;
  for (const auto& n : zoo_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::not_found("unknown zoo model '" + name + "' (known: " + known + ")");
}

}  // namespace mosaic
