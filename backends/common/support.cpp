#include "backends/common/support.hpp"

namespace mosaic {

Status float32_only(const KernelContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32)
      return Status::unsupported(ctx.node->label() + ": computes float32 only (input " + std::to_string(i) + " is " +
                                 dtype_name(ctx.inputs[i].dtype) + ")");
  for (size_t i = 0; i < ctx.outputs.size(); ++i)
    if (ctx.has_output(i) && ctx.outputs[i].dtype != DType::kF32)
      return Status::unsupported(ctx.node->label() + ": computes float32 only (output " + std::to_string(i) + " is " +
                                 dtype_name(ctx.outputs[i].dtype) + ")");
  return Status::ok();
}

Status float32_data(const KernelContext& ctx) {
  if (ctx.inputs.empty() || ctx.inputs[0].dtype != DType::kF32)
    return Status::unsupported(ctx.node->label() + ": computes float32 only (input 0 is " +
                               (ctx.inputs.empty() ? std::string("missing") : dtype_name(ctx.inputs[0].dtype)) + ")");
  return Status::ok();
}

Status no_pool_indices(const KernelContext& ctx) {
  if (ctx.has_output(1)) return Status::unsupported(ctx.node->label() + ": MaxPool's Indices output (naive only)");
  return Status::ok();
}

Status float32_pool(const KernelContext& ctx) {
  MOSAIC_RETURN_IF_ERROR(no_pool_indices(ctx));
  return float32_only(ctx);
}

}  // namespace mosaic
