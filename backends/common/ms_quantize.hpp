// The kernels of the com.microsoft quantised operators (operators/ms_quantize.hpp): int8 and
// uint8 tensors in, float32 arithmetic in the order ONNX Runtime's kernels use, one rounding
// half to even and saturation at the end. Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_ms_quantize_kernels(BackendRegistration& r);
/// com.microsoft.QLinearAdd of same-shaped 8-bit tensors, vectorised on every thread: the
/// optimised backends run a QDQ model's residual Adds with it (core/fuse_qdq_codes.cpp).
void add_fast_qlinear_add(BackendRegistration& r);

}  // namespace mosaic
