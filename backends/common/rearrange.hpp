// The kernels of operators/rearrange.hpp (DepthToSpace, SpaceToDepth, BitCast, EyeLike,
// OneHot, ReverseSequence): element copies of any type, no arithmetic.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_rearrange_kernels(BackendRegistration& r);

}  // namespace mosaic
