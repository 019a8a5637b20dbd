// The kernel of ONNX's Attention (operators/onnx_attention.hpp): plain loops in float32 with
// double sums, one query row at a time. Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_onnx_attention_kernel(BackendRegistration& r);

}  // namespace mosaic
