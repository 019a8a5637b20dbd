// Resize (operators/resize.hpp) over plain row-major float32 tensors: the taps applied one
// axis at a time, accumulated in double. naive, im2col and onednn register it (forward only).
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_resize_kernel(BackendRegistration& r);

}  // namespace mosaic
