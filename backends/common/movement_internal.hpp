// The movement kernels that live in files of their own, for movement.cpp's one table of
// shared movement kernels (movement_kernel_factory).
#pragma once

#include "core/kernel.hpp"

namespace mosaic {

KernelFactory transpose_kernel_factory();  ///< transpose_concat.cpp
KernelFactory concat_kernel_factory();     ///< transpose_concat.cpp
KernelFactory split_kernel_factory();      ///< transpose_concat.cpp

}  // namespace mosaic
