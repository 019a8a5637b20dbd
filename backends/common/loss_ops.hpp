// The kernels of ONNX's loss operators (operators/loss_ops.hpp): plain loops with double
// sums. Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_loss_op_kernels(BackendRegistration& r);

}  // namespace mosaic
