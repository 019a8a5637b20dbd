// The rows of kPointwiseOps (operators/pointwise.hpp: Floor, Ceil, Round, Sign, IsNaN, IsInf,
// Mod) over plain row-major float32 or int64 tensors, one shared loop with broadcasting;
// naive, im2col and onednn register it (forward only: the ops have no backward).
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_pointwise_kernels(BackendRegistration& r);

}  // namespace mosaic
