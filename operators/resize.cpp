#include "operators/resize.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ir/checked.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

// An optional input given as a constant; an empty tensor counts as absent (opset 11 has roi
// and scales as required inputs that may be empty).
const Tensor* optional_constant(const OpContext& ctx, size_t i, bool* missing_constant) {
  if (!ctx.has_input(i)) return nullptr;
  const Tensor* t = ctx.constant(i);
  if (!t) {
    *missing_constant = true;
    return nullptr;
  }
  return t->numel() == 0 ? nullptr : t;
}

double keys_cubic(double x, double a) {  // Keys' cubic convolution kernel
  x = std::fabs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

Expected<std::vector<TensorDesc>> infer_resize(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": " + c.node->op_type + " of " + dtype_name(c.inputs[0].dtype) + " (floats only)");
  MOSAIC_ASSIGN_OR_RETURN(ResizeParams p, resize_params(c));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, p.out}};
}

double f_resize(const OpContext& c) {
  auto p = resize_params(c);
  if (!p.ok()) return 0;
  const double taps = p->mode == "cubic" ? 4 : p->mode == "linear" ? 2 : 0;
  return 2 * taps * static_cast<double>(p->out.size()) * static_cast<double>(shape_numel(p->out));
}

}  // namespace

Expected<ResizeParams> resize_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  ResizeParams p;
  p.in = ctx.inputs[0].shape;
  const size_t r = p.in.size();
  // Upsample (versions 7 and 9) and Resize 10 had a mode and scales only; ONNX's version
  // converter reads them as Resize 11's asymmetric coordinates, nearest rounding down.
  const bool legacy = n.op_type == "Upsample" || ctx.opset < 11;
  p.mode = n.attr_string("mode", "nearest");
  p.transform = legacy ? "asymmetric" : n.attr_string("coordinate_transformation_mode", "half_pixel");
  p.nearest_mode = legacy ? "floor" : n.attr_string("nearest_mode", "round_prefer_floor");
  if (legacy && p.mode != "nearest" && p.mode != "linear")
    return Status::invalid(n.label() + ": unknown mode '" + p.mode + "' (" + n.op_type + " at opset " +
                           std::to_string(ctx.opset) + " takes nearest or linear)");
  p.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  p.extrapolation = n.attr_float("extrapolation_value", 0.f);
  p.antialias = n.attr_int("antialias", 0) != 0;
  const std::string policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    return Status::invalid(n.label() + ": unknown mode '" + p.mode + "'");
  static const char* kTransforms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                      "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
  if (std::find(std::begin(kTransforms), std::end(kTransforms), p.transform) == std::end(kTransforms))
    return Status::invalid(n.label() + ": unknown coordinate_transformation_mode '" + p.transform + "'");
  if (p.transform == "tf_half_pixel_for_nn" && ctx.opset >= 13)
    return Status::invalid(n.label() + ": tf_half_pixel_for_nn was removed in opset 13");
  if (p.transform == "half_pixel_symmetric" && ctx.opset < 19)
    return Status::invalid(n.label() + ": half_pixel_symmetric arrived in opset 19");
  if (p.mode == "nearest" && p.nearest_mode != "round_prefer_floor" && p.nearest_mode != "round_prefer_ceil" &&
      p.nearest_mode != "floor" && p.nearest_mode != "ceil")
    return Status::invalid(n.label() + ": unknown nearest_mode '" + p.nearest_mode + "'");
  if (p.antialias && p.mode == "nearest") return Status::invalid(n.label() + ": antialias needs mode linear or cubic");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    return Status::invalid(n.label() + ": unknown keep_aspect_ratio_policy '" + policy + "'");
  if (r == 0) return Status::invalid(n.label() + ": Resize of a scalar");

  std::vector<int64_t> axes;
  for (int64_t a : n.attr_ints("axes", {})) {
    MOSAIC_ASSIGN_OR_RETURN(int64_t ax, normalize_axis(a, static_cast<int64_t>(r), n));
    if (std::find(axes.begin(), axes.end(), ax) != axes.end())
      return Status::invalid(n.label() + ": axis " + std::to_string(a) + " is repeated");
    axes.push_back(ax);
  }
  if (axes.empty())
    for (size_t a = 0; a < r; ++a) axes.push_back(static_cast<int64_t>(a));
  bool run_time = false;
  const Tensor* roi = legacy ? nullptr : optional_constant(ctx, 1, &run_time);
  const Tensor* scales = optional_constant(ctx, legacy ? 1 : 2, &run_time);
  const Tensor* sizes = legacy ? nullptr : optional_constant(ctx, 3, &run_time);
  if (run_time) return Status::unsupported(n.label() + ": roi, scales and sizes must be constants known at load time");
  Tensor scales_attr;  // Upsample 7's scales are an attribute
  if (legacy && !ctx.has_input(1)) {
    const std::vector<float> given = n.attr_floats("scales", {});
    if (given.empty()) return Status::invalid(n.label() + ": " + n.op_type + " needs scales");
    scales_attr = Tensor::from_f32({static_cast<int64_t>(given.size())}, given);
    scales = &scales_attr;
  }
  if ((scales == nullptr) == (sizes == nullptr))
    return Status::invalid(n.label() + ": exactly one of scales and sizes must be given");
  p.scale.assign(r, 1.0);
  p.out = p.in;
  if (scales) {
    if (scales->numel() != static_cast<int64_t>(axes.size()) || scales->dtype() != DType::kF32)
      return Status::invalid(n.label() + ": scales must be " + std::to_string(axes.size()) + " float32 values");
    for (size_t i = 0; i < axes.size(); ++i) {
      const double s = scales->f32()[i];
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", s);
      if (!(s > 0) || !std::isfinite(s)) return Status::invalid(n.label() + ": scale " + shown + " must be > 0");
      const double size = std::floor(s * static_cast<double>(p.in[axes[i]]));
      if (size > static_cast<double>(kMaxDim))
        return Status::invalid(n.label() + ": scale " + std::string(shown) + " makes axis " + std::to_string(axes[i]) +
                               " larger than 2^31 - 1");
      p.scale[axes[i]] = s;
      p.out[axes[i]] = static_cast<int64_t>(size);
    }
  } else {
    if (sizes->numel() != static_cast<int64_t>(axes.size()) || sizes->dtype() != DType::kI64)
      return Status::invalid(n.label() + ": sizes must be " + std::to_string(axes.size()) + " int64 values");
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t s = sizes->i64()[i];
      if (s < 0 || s > kMaxDim) return Status::invalid(n.label() + ": size " + std::to_string(s) + " is outside [0, 2^31 - 1]");
      if (p.in[axes[i]] == 0 && s > 0)
        return Status::invalid(n.label() + ": axis " + std::to_string(axes[i]) + " is empty; nothing to resize to " +
                               std::to_string(s));
      p.out[axes[i]] = s;
      p.scale[axes[i]] = p.in[axes[i]] ? static_cast<double>(s) / static_cast<double>(p.in[axes[i]]) : 1.0;
    }
    if (policy != "stretch") {
      double s = p.scale[axes[0]];
      for (int64_t a : axes) s = policy == "not_larger" ? std::min(s, p.scale[a]) : std::max(s, p.scale[a]);
      for (int64_t a : axes) {
        p.scale[a] = s;
        p.out[a] = static_cast<int64_t>(s * static_cast<double>(p.in[a]) + 0.5);  // round half up
      }
    }
  }
  if (p.transform == "tf_crop_and_resize") {
    if (!roi) return Status::invalid(n.label() + ": tf_crop_and_resize needs roi");
    if (roi->numel() != 2 * static_cast<int64_t>(axes.size()))
      return Status::invalid(n.label() + ": roi must hold " + std::to_string(2 * axes.size()) + " values");
    p.roi.assign(2 * r, 0.0);
    for (size_t a = 0; a < r; ++a) p.roi[r + a] = 1.0;
    for (size_t i = 0; i < axes.size(); ++i) {
      p.roi[axes[i]] = roi->get(static_cast<int64_t>(i));
      p.roi[r + axes[i]] = roi->get(static_cast<int64_t>(axes.size() + i));
    }
  }
  return p;
}

bool resize_axis_identity(const ResizeParams& p, size_t a) {
  const size_t r = p.in.size();
  return p.scale[a] == 1.0 && p.out[a] == p.in[a] && (p.roi.empty() || (p.roi[a] == 0.0 && p.roi[r + a] == 1.0));
}

ResizeTaps resize_axis_taps(const ResizeParams& p, size_t a) {
  const size_t r = p.in.size();
  const int64_t in = p.in[a], out = p.out[a];
  const double scale = p.scale[a], in_d = static_cast<double>(in), out_len = scale * in_d;
  // Kernel size: nearest picks one of two, linear 2, cubic 4; antialias widens the linear
  // and cubic kernels by 1 / scale when downsampling.
  const double aa = p.antialias ? std::min(scale, 1.0) : 1.0;
  int64_t n = p.mode == "cubic" ? 4 : 2;
  if (p.antialias) n = p.mode == "cubic" ? 2 - 2 * static_cast<int64_t>(std::floor(-2 / aa) + 1)
                                          : 2 - 2 * static_cast<int64_t>(std::floor(-1 / aa) + 1);
  ResizeTaps t;
  t.taps = p.mode == "nearest" ? 1 : n;
  t.index.assign(static_cast<size_t>(out * t.taps), 0);
  t.weight.assign(static_cast<size_t>(out * t.taps), 0.0);
  t.outside.assign(static_cast<size_t>(out), false);
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t o = 0; o < out; ++o) {
    const double y = static_cast<double>(o);
    double x = 0;
    if (p.transform == "align_corners") x = out_len == 1 ? 0.0 : y * (in_d - 1) / (out_len - 1);
    else if (p.transform == "asymmetric") x = y / scale;
    else if (p.transform == "pytorch_half_pixel") x = out_len == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    else if (p.transform == "half_pixel") x = (y + 0.5) / scale - 0.5;
    else if (p.transform == "tf_half_pixel_for_nn") x = (y + 0.5) / scale;  // opsets 11 and 12
    else if (p.transform == "half_pixel_symmetric") {
      const double adjustment = static_cast<double>(out) / out_len, center = in_d / 2;
      x = center * (1 - adjustment) + (y + 0.5) / scale - 0.5;
    } else {  // tf_crop_and_resize
      const double s = p.roi[a], e = p.roi[r + a];
      x = out_len == 1 ? (e - s) * (in_d - 1) / 2 : y * (e - s) * (in_d - 1) / (out_len - 1);
      x += s * (in_d - 1);
      t.outside[o] = x < 0 || x > in_d - 1;
    }
    // A hostile roi can put x anywhere: keep it where the index arithmetic is defined.
    if (!std::isfinite(x)) {
      t.outside[o] = true;
      x = 0;
    }
    x = std::clamp(x, -4.0 * static_cast<double>(kMaxDim), 4.0 * static_cast<double>(kMaxDim));
    // The left neighbour and the distance to it, in (0, 1]: an integer position takes the
    // neighbour below it with ratio 1 (ONNX's tie rule).
    double base = std::floor(x), ratio = x - base;
    if (ratio == 0) {
      base -= 1;
      ratio = 1;
    }
    const int64_t first = static_cast<int64_t>(base) + 1 - n / 2;
    auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
    if (p.mode == "nearest") {
      bool up = false;  // the right neighbour of the two
      if (ratio == 1) up = true;
      else if (p.nearest_mode == "round_prefer_floor") up = ratio > 0.5;
      else if (p.nearest_mode == "round_prefer_ceil") up = ratio >= 0.5;
      else up = p.nearest_mode == "ceil";
      t.index[o] = clamp(static_cast<int64_t>(base) + (up ? 1 : 0));
      t.weight[o] = 1.0;
      continue;
    }
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double d = (static_cast<double>(first + k) - static_cast<double>(base)) - ratio;  // tap - x
      double v = p.mode == "linear" ? std::clamp(1 - std::fabs(d * aa), 0.0, 1.0) : keys_cubic(d * aa, p.cubic_a);
      if (p.exclude_outside && (first + k < 0 || first + k >= in)) v = 0;
      w[k] = v;
      sum += v;
    }
    const bool normalise = p.antialias || p.exclude_outside;
    for (int64_t k = 0; k < n; ++k) {
      t.index[o * n + k] = clamp(first + k);
      t.weight[o * n + k] = normalise && sum != 0 ? w[k] / sum : w[k];
    }
  }
  return t;
}

void add_resize_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& s = add_schema(table, "Resize", 1, 4, infer_resize, f_resize,
                           "nearest, linear or cubic interpolation to scales or sizes (every coordinate transformation)");
  s.shape_inputs = {1, 2, 3};
  s.non_trainable_inputs = {1, 2, 3};
  // Upsample (versions 7 and 9, deprecated at opset 10): Resize 10's semantics.
  OpSchema& u = add_schema(table, "Upsample", 1, 2, infer_resize, f_resize,
                           "nearest or linear upsampling by scales (Resize 10: asymmetric, nearest rounding down)");
  u.shape_inputs = {1};
  u.non_trainable_inputs = {1};
}

}  // namespace mosaic
