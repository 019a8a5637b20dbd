// The im2col backend: convolution as im2col + OpenBLAS sgemm (Caffe-style), Gemm and
// MatMul on OpenBLAS, element-wise and normalisation ops on Eigen, pooling as
// OpenMP loops. Layout is plain row-major NCHW throughout.
#pragma once

#include "core/registration.hpp"

namespace mosaic {

Status register_im2col(Registrar& registrar);
/// The Eigen version compiled in ("3.4.0").
std::string eigen_version();

}  // namespace mosaic
