// The kernel of Einsum (operators/einsum.hpp): one loop over the whole label space, float32
// and float64 in double sums, int64 wrapping; Det's, float32 and float64 eliminated in double.
// Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_einsum_det_kernels(BackendRegistration& r);

}  // namespace mosaic
