// The kernel of Einsum (operators/einsum.hpp): one loop over the whole label space, float32
// and float64 in double sums, int64 wrapping. Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_einsum_kernel(BackendRegistration& r);

}  // namespace mosaic
