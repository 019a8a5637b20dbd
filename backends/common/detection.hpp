// The kernels of NonZero, NonMaxSuppression and RoiAlign (operators/detection.hpp), in
// float32. Registered by the naive oracle. NonZero's and NonMaxSuppression's output length
// depends on their inputs' values: each run checks that it is the length the plan was made
// for and fails, naming the node and both lengths, where it is not.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_detection_kernels(BackendRegistration& r);

/// The run's failure where a value-dependent output length is not the planned one: names the
/// node, what was counted (`what`, e.g. "it keeps slices:") and both lengths.
Status output_length_changed(const Node& n, int64_t planned, int64_t now, const char* what);

}  // namespace mosaic
