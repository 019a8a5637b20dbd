// CumSum, Tile and GatherElements (operators/indexing.hpp) over plain row-major tensors: one
// shared loop each, forward for float32 and int64 (Tile and GatherElements: any dtype, as
// byte moves), backward for float32 data. naive, im2col and onednn register them.
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

void register_indexing_kernels(BackendRegistration& r);

}  // namespace mosaic
