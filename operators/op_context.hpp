// What an operator's schema and attribute parsers see of one node. The operators layer
// needs nothing of kernels or plans: core's KernelContext extends this with what a kernel
// is created with (memory tracker, training mode, layouts).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.hpp"
#include "ir/tensor.hpp"

namespace mosaic {

/// One node with the static descriptors of its inputs and outputs and the values of its
/// constant inputs (initializers), as shape inference, FLOP counting and attribute parsing
/// read them.
struct OpContext {
  const Node* node = nullptr;
  int64_t opset = 13;
  std::vector<TensorDesc> inputs;          ///< empty shape + missing flag for omitted inputs
  std::vector<bool> input_present;
  std::vector<TensorDesc> outputs;
  std::vector<bool> output_present;
  std::vector<const Tensor*> constants;    ///< non-null where input i is an initializer

  bool has_input(size_t i) const { return i < input_present.size() && input_present[i]; }
  bool has_output(size_t i) const { return i < output_present.size() && output_present[i]; }
  const Tensor* constant(size_t i) const { return i < constants.size() ? constants[i] : nullptr; }
};

}  // namespace mosaic
