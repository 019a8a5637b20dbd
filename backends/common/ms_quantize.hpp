// The kernels of the com.microsoft quantised operators (operators/ms_quantize.hpp): int8 and
// uint8 tensors in, float32 arithmetic in the order ONNX Runtime's kernels use, one rounding
// half to even and saturation at the end. Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_ms_quantize_kernels(BackendRegistration& r);

}  // namespace mosaic
