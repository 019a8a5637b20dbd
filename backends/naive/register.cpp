// The naive oracle's registration. Its kernels are in one file per family (conv, pool, gemm,
// eltwise, norm, shape_ops, variadic; reductions, LayerNormalization, comparisons/Where/
// Expand and data movement are the shared loops of backends/common/); what they share is in
// naive_internal.hpp.
#include "backends/common/attention.hpp"
#include "backends/common/layer_norm.hpp"
#include "backends/common/indexing.hpp"
#include "backends/common/logic.hpp"
#include "backends/common/pointwise.hpp"
#include "backends/common/einsum.hpp"
#include "backends/common/linear_attention.hpp"
#include "backends/common/detection.hpp"
#include "backends/common/selection.hpp"
#include "backends/common/grid_sample.hpp"
#include "backends/common/loss_ops.hpp"
#include "backends/common/quantize.hpp"
#include "backends/common/ms_quantize.hpp"
#include "backends/common/signal.hpp"
#include "core/control_flow.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/rearrange.hpp"
#include "backends/common/onnx_attention.hpp"
#include "backends/common/reduce.hpp"
#include "backends/common/resize.hpp"
#include "backends/common/rnn.hpp"
#include "backends/common/support.hpp"
#include "backends/naive/naive_internal.hpp"
#include "core/promote.hpp"

namespace mosaic {

Status register_naive(Registrar& registrar) {
  BackendRegistration r(registrar, {"naive",
                                   "plain loops in float32 and int64 (float16/bfloat16 and the narrow integers widened): "
                                   "the reference oracle every backend is checked against",
                                   nullptr, nullptr});
  // Every kernel below takes every element type it can widen without loss (core/promote.hpp).
  r.adapt(promote_element_types);
  naive_impl::add_conv_kernels(r);
  naive_impl::add_pool_kernels(r);
  naive_impl::add_gemm_kernels(r);
  naive_impl::add_eltwise_kernels(r);
  naive_impl::add_norm_kernels(r);
  add_logic_kernels(r);
  add_pointwise_kernels(r);
  add_indexing_kernels(r);
  add_resize_kernel(r);
  add_onnx_attention_kernel(r);
  add_loss_op_kernels(r);
  add_quantize_kernels(r);
  add_ms_quantize_kernels(r);
  add_control_flow_kernels(r);
  add_signal_kernels(r);
  add_einsum_det_kernels(r);
  add_grid_sample_kernel(r);
  add_detection_kernels(r);
  add_selection_kernels(r);  // Compress, Unique
  add_linear_attention_kernels(r);  // LinearAttention, CausalConvWithState
  add_rearrange_kernels(r);
  add_rnn_kernels(r, loop_gemm<float>, float32_data);
  add_attention_kernel(r, loop_gemm<float>, false);
  naive_impl::add_shape_op_kernels(r);
  naive_impl::add_variadic_kernels(r);
  add_reduce_loop_kernels(r, {});
  add_arg_extreme_kernels(r);
  add_layer_norm_loop_kernel(r, {});
  add_view_kernels(r);
  for (const char* op : {"Transpose", "Concat", "Split", "Slice", "Pad", "Gather", "Cast", "CastLike", "Shape", "Size", "Constant", "ConstantOfShape"})
    add_movement_kernel(r, op);
  return r.status();
}

}  // namespace mosaic
