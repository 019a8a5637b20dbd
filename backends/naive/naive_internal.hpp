// Internal to the naive oracle: what its kernel families share, and the registration
// function of each family. Not a public header.
#pragma once

#include <algorithm>

#include "backends/common/grad.hpp"
#include "backends/naive/naive.hpp"
#include "core/registration.hpp"
#include "operators/params.hpp"

namespace mosaic::naive_impl {

/// Training plans are not fused: a fused activation has no backward here.
inline Status no_fused_backward(const Activation& act, const Node& node) {
  if (act.active())
    return Status::unsupported(node.label() + ": backward of a fused activation (training plans are not fused)");
  return Status::ok();
}

// The kernel families, each in its own file; register.cpp calls them.
void add_conv_kernels(BackendRegistration& r);
void add_pool_kernels(BackendRegistration& r);
void add_gemm_kernels(BackendRegistration& r);
void add_eltwise_kernels(BackendRegistration& r);
void add_norm_kernels(BackendRegistration& r);
void add_shape_op_kernels(BackendRegistration& r);
void add_variadic_kernels(BackendRegistration& r);

}  // namespace mosaic::naive_impl
