#include "operators/conv_transpose.hpp"

#include "ir/checked.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_conv_transpose(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.has_input(i) && !dtype_is_float(c.inputs[i].dtype))
      return Status::unsupported(c.node->label() + ": ConvTranspose takes floating-point tensors");
  MOSAIC_ASSIGN_OR_RETURN(ConvTransposeParams p, conv_transpose_params(c));
  Shape out{p.n, p.m};
  out.insert(out.end(), p.out.begin(), p.out.end());
  return std::vector<TensorDesc>{{c.inputs[0].dtype, out}};
}

// One multiply-add per input element per kernel tap per output channel of its group.
double f_conv_transpose(const OpContext& c) {
  auto p = conv_transpose_params(c);
  if (!p.ok()) return 0;
  return 2.0 * static_cast<double>(c.inputs[0].numel()) * static_cast<double>(shape_numel(p->kernel)) *
         static_cast<double>(p->m / p->group);
}

}  // namespace

Expected<ConvTransposeParams> conv_transpose_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &w = ctx.inputs[1].shape;
  if (x.size() < 3 || w.size() != x.size())
    return Status::invalid(n.label() + ": X " + shape_str(x) + " and W " + shape_str(w) + " must be [N, C, D...] and [C, M/group, K...]");
  const size_t k = x.size() - 2;
  ConvTransposeParams p;
  p.n = x[0];
  p.c = x[1];
  p.group = n.attr_int("group", 1);
  if (p.group <= 0 || p.c % p.group || w[0] != p.c)
    return Status::invalid(n.label() + ": W " + shape_str(w) + " must have X's " + std::to_string(p.c) +
                           " channels first, divisible into group " + std::to_string(p.group));
  if (!checked_mul(w[1], p.group, &p.m) || p.m > kMaxDim) return Status::invalid(n.label() + ": too many output channels");
  p.in.assign(x.begin() + 2, x.end());
  p.kernel.assign(w.begin() + 2, w.end());
  auto list = [&](const char* name, int64_t def, size_t count) -> Expected<std::vector<int64_t>> {
    std::vector<int64_t> v = n.has_attr(name) ? n.attr_ints(name) : std::vector<int64_t>(count, def);
    if (v.size() != count)
      return Status::invalid(n.label() + ": " + name + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(count));
    for (int64_t e : v)
      if (e < (def == 1 ? 1 : 0) || e > kMaxDim) return Status::invalid(n.label() + ": " + name + " value " + std::to_string(e) + " out of range");
    return v;
  };
  MOSAIC_ASSIGN_OR_RETURN(p.strides, list("strides", 1, k));
  MOSAIC_ASSIGN_OR_RETURN(p.dilations, list("dilations", 1, k));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<int64_t> out_pad, list("output_padding", 0, k));
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != std::vector<int64_t>(p.kernel.begin(), p.kernel.end()))
    return Status::invalid(n.label() + ": kernel_shape differs from W's " + shape_str(p.kernel));
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (!same && auto_pad != "NOTSET" && auto_pad != "VALID")
    return Status::invalid(n.label() + ": auto_pad '" + auto_pad + "'");
  // The extent before padding: stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1.
  std::vector<int64_t> full(k);
  for (size_t d = 0; d < k; ++d) {
    const __int128 v = static_cast<__int128>(p.strides[d]) * (p.in[d] - 1) + out_pad[d] +
                       static_cast<__int128>(p.kernel[d] - 1) * p.dilations[d] + 1;
    if (v > kMaxDim) return Status::invalid(n.label() + ": output extent beyond 2^31 - 1 along axis " + std::to_string(d));
    full[d] = static_cast<int64_t>(v);
  }
  std::vector<int64_t> pads;
  const bool has_shape = n.has_attr("output_shape");
  std::vector<int64_t> shape;
  if (has_shape) {
    shape = n.attr_ints("output_shape");
    if (shape.size() == k + 2) shape.erase(shape.begin(), shape.begin() + 2);  // the whole shape given
    if (shape.size() != k) return Status::invalid(n.label() + ": output_shape has " + std::to_string(shape.size()) + " values");
    for (int64_t e : shape)
      if (e < 0 || e > kMaxDim) return Status::invalid(n.label() + ": output_shape value " + std::to_string(e) + " out of range");
  }
  if (n.has_attr("pads")) {
    MOSAIC_ASSIGN_OR_RETURN(pads, list("pads", 0, 2 * k));
  } else if (same) {  // from the total padding: the odd one at the end (SAME_UPPER) or the start
    pads.assign(2 * k, 0);
    for (size_t d = 0; d < k; ++d) {
      const int64_t target = has_shape ? shape[d] : p.in[d] * p.strides[d];
      const int64_t total = full[d] - target;
      pads[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[d + k] = total - pads[d];
    }
  } else {
    pads.assign(2 * k, 0);
  }
  p.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  for (size_t d = 0; d < k; ++d) {
    const int64_t o = has_shape ? shape[d] : full[d] - pads[d] - pads[d + k];
    if (o < 0) return Status::invalid(n.label() + ": the padding leaves a negative extent along axis " + std::to_string(d));
    p.out.push_back(o);
  }
  p.has_bias = ctx.has_input(2);
  if (p.has_bias && ctx.inputs[2].shape != Shape{p.m})
    return Status::invalid(n.label() + ": B must have shape [" + std::to_string(p.m) + "], got " + shape_str(ctx.inputs[2].shape));
  if (shape_numel(p.out) * p.n * p.m > kMaxTensorBytes) return Status::invalid(n.label() + ": output too large");
  return p;
}

void add_conv_transpose_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& s = add_schema(table, "ConvTranspose", 2, 3, infer_conv_transpose, f_conv_transpose,
                           "transposed convolution: each input element spread over the kernel's window (strides, groups)");
  s.backward_flops = nullptr;
}

}  // namespace mosaic
