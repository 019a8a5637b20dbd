// The ops of operators/indexing.hpp (CumSum, Tile, GatherElements, GatherND, ScatterElements,
// ScatterND, TopK) over plain row-major tensors: one shared loop each, forward for float32 and
// int64 (the gathers, Tile and a plain scatter: any dtype, as byte moves), backward for
// float32 data where the op has one. naive, im2col and onednn register them.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

void add_indexing_kernels(BackendRegistration& r);

}  // namespace mosaic
