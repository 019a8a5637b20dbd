// Built-in model zoo: the seed's CIFAR networks, built as Mosaic graphs with seeded
// PyTorch-style random weights, and exported as ONNX by `mosaic export`.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace mosaic {

/// Names accepted by build_zoo_model.
std::vector<std::string> zoo_names();
/// One-line description of a zoo model.
std::string zoo_description(const std::string& name);
/// Builds a zoo model with a symbolic batch dimension. Unknown names give kNotFound.
Expected<Graph> build_zoo_model(const std::string& name, uint64_t seed = 0);

}  // namespace mosaic
