// The im2col backend: convolution as im2col + OpenBLAS sgemm (Caffe-style), Gemm and
// MatMul on OpenBLAS, element-wise and normalisation ops on Eigen, pooling as
// OpenMP loops. Layout is plain row-major NCHW throughout.
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

void register_im2col_kernels(KernelRegistry& registry);

}  // namespace mosaic
