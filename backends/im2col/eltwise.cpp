// The im2col backend's element-wise activations (Eigen's vectorised forms of the common ops,
// the table's rules in operators/eltwise.hpp for the rest) and its broadcasting binary ops (the
// shared row loops).
#include "backends/common/eltwise_loops.hpp"
#include "backends/common/support.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {

void add_eltwise_kernels(BackendRegistration& r) {
  // The binary ops: the shared row loops (common/eltwise_loops.hpp), which vectorise as well.
  for (const auto& b : kBinaryOps) r.kernel(b.name, binary_loop_factory(), {LayoutUse::kNone, float32_only});
  // The activations: the shared blocked kernel over Eigen's vectorised blocks (common.cpp).
  for (const auto& u : kUnaryOps)
    r.kernel(u.name, unary_loop_factory(unary_forward_block, unary_backward_block), {LayoutUse::kNone, float32_only});
}

}  // namespace mosaic::im2col_impl
