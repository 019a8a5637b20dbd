#include "operators/deform_conv.hpp"

#include <cmath>

#include "ir/checked.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_deform_conv(const OpContext& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.has_input(i) && !dtype_is_float(c.inputs[i].dtype))
      return Status::unsupported(c.node->label() + ": DeformConv takes floating-point tensors");
  MOSAIC_ASSIGN_OR_RETURN(DeformConvParams p, deform_conv_params(c));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, {p.n, p.m, p.oh, p.ow}}};
}

// Per output element, per tap of its group's channels: the bilinear sample (4 multiply-adds),
// the mask and the weight.
double f_deform_conv(const OpContext& c) {
  auto p = deform_conv_params(c);
  if (!p.ok()) return 0;
  return 12.0 * static_cast<double>(p->n * p->m * p->oh * p->ow) * static_cast<double>(p->c / p->group) *
         static_cast<double>(p->kh * p->kw);
}


}  // namespace

Expected<DeformConvParams> deform_conv_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &w = ctx.inputs[1].shape, &off = ctx.inputs[2].shape;
  if (x.size() != 4 || w.size() != 4)
    return Status::unsupported(n.label() + ": DeformConv of X " + shape_str(x) + " and W " + shape_str(w) +
                               " (Mosaic takes 2-D: [N, C, H, W] and [M, C / group, kH, kW])");
  DeformConvParams p;
  p.n = x[0], p.c = x[1], p.h = x[2], p.w = x[3], p.m = w[0], p.kh = w[2], p.kw = w[3];
  p.group = n.attr_int("group", 1);
  p.offset_group = n.attr_int("offset_group", 1);
  if (p.group < 1 || p.c % p.group != 0 || w[1] * p.group != p.c || p.m % p.group != 0)
    return Status::invalid(n.label() + ": X's " + std::to_string(p.c) + " channels, W " + shape_str(w) + " and group " +
                           std::to_string(p.group) + " disagree");
  if (p.offset_group < 1 || p.c % p.offset_group != 0)
    return Status::invalid(n.label() + ": offset_group " + std::to_string(p.offset_group) + " must divide the " +
                           std::to_string(p.c) + " channels");
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != std::vector<int64_t>{p.kh, p.kw})
    return Status::invalid(n.label() + ": kernel_shape differs from W's " + shape_str(Shape{p.kh, p.kw}));
  MOSAIC_ASSIGN_OR_RETURN(p.strides, bounded_ints(n, "strides", 1, 1, 2));
  MOSAIC_ASSIGN_OR_RETURN(p.dilations, bounded_ints(n, "dilations", 1, 1, 2));
  MOSAIC_ASSIGN_OR_RETURN(p.pads, bounded_ints(n, "pads", 0, 0, 4));
  const int64_t ext[2] = {p.h, p.w}, k[2] = {p.kh, p.kw};
  int64_t out[2];
  for (int d = 0; d < 2; ++d) {
    const __int128 room = static_cast<__int128>(ext[d]) + p.pads[d] + p.pads[d + 2] -
                          (static_cast<__int128>(p.dilations[d]) * (k[d] - 1) + 1);
    if (room < 0) return Status::invalid(n.label() + ": the dilated kernel is larger than the padded input");
    out[d] = static_cast<int64_t>(room / p.strides[d] + 1);
  }
  p.oh = out[0], p.ow = out[1];
  const int64_t taps = p.kh * p.kw;
  if (off != Shape{p.n, p.offset_group * taps * 2, p.oh, p.ow})
    return Status::invalid(n.label() + ": offset " + shape_str(off) + " must be " +
                           shape_str(Shape{p.n, p.offset_group * taps * 2, p.oh, p.ow}));
  p.has_bias = ctx.has_input(3);
  if (p.has_bias && ctx.inputs[3].shape != Shape{p.m})
    return Status::invalid(n.label() + ": B must be [" + std::to_string(p.m) + "], got " + shape_str(ctx.inputs[3].shape));
  p.has_mask = ctx.has_input(4);
  if (p.has_mask && ctx.inputs[4].shape != Shape{p.n, p.offset_group * taps, p.oh, p.ow})
    return Status::invalid(n.label() + ": mask " + shape_str(ctx.inputs[4].shape) + " must be " +
                           shape_str(Shape{p.n, p.offset_group * taps, p.oh, p.ow}));
  if (static_cast<double>(p.n) * static_cast<double>(p.m) * static_cast<double>(p.oh) * static_cast<double>(p.ow) >
      static_cast<double>(kMaxTensorBytes))
    return Status::invalid(n.label() + ": output too large");
  return p;
}

double sample_bilinear_zero_padded(const float* plane, int64_t h, int64_t w, double y, double x) {
  if (!(y > -1 && y < static_cast<double>(h) && x > -1 && x < static_cast<double>(w))) return 0.0;  // NaN too
  const double y0 = std::floor(y), x0 = std::floor(x), fy = y - y0, fx = x - x0;
  const auto r0 = static_cast<int64_t>(y0), c0 = static_cast<int64_t>(x0);
  auto at = [&](int64_t r, int64_t c) { return r >= 0 && r < h && c >= 0 && c < w ? static_cast<double>(plane[r * w + c]) : 0.0; };
  return (1 - fy) * ((1 - fx) * at(r0, c0) + fx * at(r0, c0 + 1)) + fy * ((1 - fx) * at(r0 + 1, c0) + fx * at(r0 + 1, c0 + 1));
}

void add_deform_conv_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& s = add_schema(table, "DeformConv", 3, 5, infer_deform_conv, f_deform_conv,
                           "2-D convolution whose taps sample X at learned offsets (bilinear), optionally masked");
  s.backward_flops = nullptr;
}

}  // namespace mosaic
