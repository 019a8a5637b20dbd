// The kernels of Compress and Unique (operators/selection.hpp): every element type but the
// packed 4- and 2-bit ones, bytes copied. Registered by the naive oracle. Their output
// lengths depend on input values: each run checks that they are the planned ones and fails,
// naming the node and both lengths, where they are not.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_selection_kernels(BackendRegistration& r);

}  // namespace mosaic
