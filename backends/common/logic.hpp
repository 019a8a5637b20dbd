// Comparisons, logical ops, Not, Where and Expand over plain row-major tensors of any dtype
// (backends/common/logic.cpp): masks and broadcasts are byte moves and compares, one shared
// loop each; naive and im2col register them.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

/// Registers Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor, Not, Where and
/// Expand (forward; backward of Where and Expand for float data).
void add_logic_kernels(BackendRegistration& r);

}  // namespace mosaic
