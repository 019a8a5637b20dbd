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
  /// The value of input i where it is a constant; nullptr otherwise (and, for a present
  /// input, asked_unknown_value is set).
  const Tensor* constant(size_t i) const {
    const Tensor* t = i < constants.size() ? constants[i] : nullptr;
    if (!t && has_input(i)) asked_unknown_value = true;
    return t;
  }
  /// Set when constant() was asked for a present input that is not a constant: a shape
  /// inference that then fails needed a value known only at run time (prepare_graph plans
  /// such nodes from given inputs, core/run_time_shape.hpp).
  mutable bool asked_unknown_value = false;
};

}  // namespace mosaic
