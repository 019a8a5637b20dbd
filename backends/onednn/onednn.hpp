// The oneDNN backend: oneDNN 2.x primitives (convolution, pooling, matmul, eltwise,
// binary, softmax/logsoftmax, batch normalisation, LRN, concat, reorder). Primitives and
// prepacked weights are built once when a kernel is created; activations cross kernel
// boundaries in plain row-major layout, and kernels reorder to oneDNN's preferred
// blocked layouts internally where that is faster.
#pragma once

#include <string>

#include "core/kernel.hpp"

namespace mosaic {

void register_onednn_kernels(KernelRegistry& registry);
/// oneDNN's effective CPU instruction set, e.g. "avx512_core_amx".
std::string onednn_effective_isa();

}  // namespace mosaic
