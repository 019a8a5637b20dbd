// The kernels of NonZero, NonMaxSuppression and RoiAlign (operators/detection.hpp), in
// float32. Registered by the naive oracle. NonZero's and NonMaxSuppression's output length
// depends on their inputs' values: each run checks that it is the length the plan was made
// for and fails, naming the node and both lengths, where it is not.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_detection_kernels(BackendRegistration& r);

}  // namespace mosaic
