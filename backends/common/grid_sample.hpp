// The kernel of GridSample (operators/grid_sample.hpp), in float32 with double weights.
// Registered by the naive oracle.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_grid_sample_kernel(BackendRegistration& r);

}  // namespace mosaic
