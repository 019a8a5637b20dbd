// The kernels of LinearAttention and CausalConvWithState (operators/linear_attention.hpp):
// float32 (16-bit tensors widened around them), the recurrence and the convolution in
// double, token by token in the order ONNX defines. Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_linear_attention_kernels(BackendRegistration& r);

}  // namespace mosaic
