#include "operators/params.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/checked.hpp"

namespace mosaic {

namespace {
int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return p;
}
}  // namespace

int64_t Window::in_size() const { return prod(in); }
int64_t Window::out_size() const { return prod(out); }
int64_t Window::kernel_size() const { return prod(kernel); }

Expected<Window> make_window(const Node& node, const Shape& in_spatial, const std::vector<int64_t>& kernel,
                             bool ceil_mode) {
  const size_t r = in_spatial.size();
  Window w;
  w.in = in_spatial;
  w.kernel = kernel;
  if (kernel.size() != r)
    return Status::invalid(node.label() + ": kernel has " + std::to_string(kernel.size()) + " dims, input has " +
                           std::to_string(r) + " spatial dims");
  w.stride = node.attr_ints("strides", std::vector<int64_t>(r, 1));
  w.dilation = node.attr_ints("dilations", std::vector<int64_t>(r, 1));
  std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (w.stride.size() != r || w.dilation.size() != r || pads.size() != 2 * r)
    return Status::invalid(node.label() + ": strides/dilations/pads do not match the " + std::to_string(r) +
                           " spatial dims of the input");
  for (size_t i = 0; i < r; ++i) {
    if (w.stride[i] < 1 || w.dilation[i] < 1 || w.kernel[i] < 1)
      return Status::invalid(node.label() + ": kernel, strides and dilations must be >= 1");
    if (pads[i] < 0 || pads[i + r] < 0) return Status::invalid(node.label() + ": negative pads");
    // Bounded so that the window arithmetic below cannot overflow (kMaxDim^2 < 2^63).
    if (w.stride[i] > kMaxDim || w.dilation[i] > kMaxDim || w.kernel[i] > kMaxDim || pads[i] > kMaxDim ||
        pads[i + r] > kMaxDim)
      return Status::invalid(node.label() + ": kernel, strides, dilations or pads above 2^31 - 1");
  }
  w.pad_begin.assign(pads.begin(), pads.begin() + static_cast<long>(r));
  w.pad_end.assign(pads.begin() + static_cast<long>(r), pads.end());
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  w.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t ext = (w.kernel[i] - 1) * w.dilation[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      w.out[i] = (w.in[i] + w.stride[i] - 1) / w.stride[i];
      int64_t total = std::max<int64_t>(0, (w.out[i] - 1) * w.stride[i] + ext - w.in[i]);
      int64_t small = total / 2, big = total - total / 2;
      w.pad_begin[i] = auto_pad == "SAME_UPPER" ? small : big;
      w.pad_end[i] = total - w.pad_begin[i];
    } else if (auto_pad == "VALID") {
      w.pad_begin[i] = w.pad_end[i] = 0;
      w.out[i] = (w.in[i] - ext) / w.stride[i] + 1;
      if (w.in[i] < ext) w.out[i] = 0;
    } else if (auto_pad == "NOTSET") {
      const int64_t span = w.in[i] + w.pad_begin[i] + w.pad_end[i] - ext;
      if (span < 0) w.out[i] = 0;
      else if (ceil_mode) {
        w.out[i] = (span + w.stride[i] - 1) / w.stride[i] + 1;
        // The last window must start inside the input or the leading padding.
        if ((w.out[i] - 1) * w.stride[i] >= w.in[i] + w.pad_begin[i]) --w.out[i];
      } else {
        w.out[i] = span / w.stride[i] + 1;
      }
    } else {
      return Status::invalid(node.label() + ": unknown auto_pad '" + auto_pad + "'");
    }
    if (w.out[i] <= 0)
      return Status::invalid(node.label() + ": window of extent " + std::to_string(ext) +
                             " does not fit input size " + std::to_string(w.in[i]));
  }
  return w;
}

Window3::Window3(const Window& w) {
  const size_t r = std::min<size_t>(w.rank(), 3), off = 3 - r;
  for (size_t i = 0; i < r; ++i) {
    in[off + i] = w.in[i];
    out[off + i] = w.out[i];
    k[off + i] = w.kernel[i];
    s[off + i] = w.stride[i];
    d[off + i] = w.dilation[i];
    pb[off + i] = w.pad_begin[i];
    pe[off + i] = w.pad_end[i];
  }
}

Expected<Window3> lift_window3(const Window& w, const Node& node) {
  if (w.rank() < 1 || w.rank() > 3)
    return Status::unsupported(node.label() + ": " + std::to_string(w.rank()) + "-d windows (1-3 supported)");
  return Window3(w);
}

Activation fused_activation(const Node& node) {
  Activation a;
  a.op = unary_op_of(node.attr_string("mosaic.activation", ""));
  a.args.alpha = node.attr_float("mosaic.alpha", 0.f);
  a.args.beta = node.attr_float("mosaic.beta", 0.f);
  a.args.gamma = node.attr_float("mosaic.gamma", 0.f);
  a.args.lo = node.attr_float("mosaic.min", -std::numeric_limits<float>::infinity());
  a.args.hi = node.attr_float("mosaic.max", std::numeric_limits<float>::infinity());
  a.args.tanh = node.attr_int("mosaic.tanh", 0) != 0;
  return a;
}

Expected<ConvParams> conv_params(const OpContext& ctx) {
  const Node& node = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const Shape& wt = ctx.inputs[1].shape;
  if (x.size() < 3) return Status::invalid(node.label() + ": input must be N x C x spatial..., got " + shape_str(x));
  if (wt.size() != x.size())
    return Status::invalid(node.label() + ": weight rank " + std::to_string(wt.size()) + " != input rank " +
                           std::to_string(x.size()));
  ConvParams p;
  p.n = x[0];
  p.c = x[1];
  p.oc = wt[0];
  p.group = node.attr_int("group", 1);
  if (p.group < 1 || p.c % p.group || p.oc % p.group || wt[1] * p.group != p.c)
    return Status::invalid(node.label() + ": input channels " + std::to_string(p.c) + ", weight " + shape_str(wt) +
                           " and group " + std::to_string(p.group) + " do not fit");
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  if (node.has_attr("kernel_shape") && node.attr_ints("kernel_shape") != kernel)
    return Status::invalid(node.label() + ": kernel_shape disagrees with the weight shape " + shape_str(wt));
  MOSAIC_ASSIGN_OR_RETURN(p.win, make_window(node, Shape(x.begin() + 2, x.end()), kernel, false));
  p.has_bias = ctx.has_input(2);
  if (p.has_bias && ctx.inputs[2].shape != Shape{p.oc})
    return Status::invalid(node.label() + ": bias shape " + shape_str(ctx.inputs[2].shape) + " != [" +
                           std::to_string(p.oc) + "]");
  return p;
}

Expected<PoolParams> pool_params(const OpContext& ctx) {
  const Node& node = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  if (x.size() < 3) return Status::invalid(node.label() + ": input must be N x C x spatial..., got " + shape_str(x));
  PoolParams p;
  p.n = x[0];
  p.c = x[1];
  Shape spatial(x.begin() + 2, x.end());
  const bool global = node.op_type.rfind("Global", 0) == 0;
  if (global) {
    p.win.in = spatial;
    p.win.kernel = spatial;
    p.win.out.assign(spatial.size(), 1);
    p.win.stride.assign(spatial.size(), 1);
    p.win.dilation.assign(spatial.size(), 1);
    p.win.pad_begin.assign(spatial.size(), 0);
    p.win.pad_end.assign(spatial.size(), 0);
    return p;
  }
  if (!node.has_attr("kernel_shape")) return Status::invalid(node.label() + ": missing attribute kernel_shape");
  p.ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  p.count_include_pad = node.attr_int("count_include_pad", 0) != 0;
  p.storage_order = node.attr_int("storage_order", 0);
  MOSAIC_ASSIGN_OR_RETURN(p.win, make_window(node, spatial, node.attr_ints("kernel_shape"), p.ceil_mode));
  return p;
}

Expected<GemmParams> gemm_params(const OpContext& ctx) {
  const Node& node = *ctx.node;
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  if (a.size() != 2 || b.size() != 2)
    return Status::invalid(node.label() + ": A and B must be 2-D, got " + shape_str(a) + " and " + shape_str(b));
  GemmParams p;
  p.trans_a = node.attr_int("transA", 0) != 0;
  p.trans_b = node.attr_int("transB", 0) != 0;
  p.alpha = node.attr_float("alpha", 1.f);
  p.beta = node.attr_float("beta", 1.f);
  p.m = p.trans_a ? a[1] : a[0];
  p.k = p.trans_a ? a[0] : a[1];
  const int64_t kb = p.trans_b ? b[1] : b[0];
  p.n = p.trans_b ? b[0] : b[1];
  if (kb != p.k)
    return Status::invalid(node.label() + ": inner dimensions differ: A " + shape_str(a) + " B " + shape_str(b));
  p.has_c = ctx.has_input(2);
  if (p.has_c) {
    const Shape& c = ctx.inputs[2].shape;
    auto bc = broadcast_shapes(c, {p.m, p.n});
    if (!bc.ok() || bc.value() != Shape{p.m, p.n} || c.size() > 2)
      return Status::invalid(node.label() + ": C " + shape_str(c) + " does not broadcast to [" +
                             std::to_string(p.m) + "," + std::to_string(p.n) + "]");
  }
  return p;
}

Expected<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return Status::invalid("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Expected<MatMulParams> matmul_params(const Shape& a_in, const Shape& b_in) {
  if (a_in.empty() || b_in.empty()) return Status::invalid("MatMul operands must have rank >= 1");
  MatMulParams p;
  Shape a = a_in, b = b_in;
  p.a_is_vector = a.size() == 1;
  p.b_is_vector = b.size() == 1;
  if (p.a_is_vector) a.insert(a.begin(), 1);
  if (p.b_is_vector) b.push_back(1);
  p.m = a[a.size() - 2];
  p.k = a[a.size() - 1];
  p.n = b[b.size() - 1];
  if (b[b.size() - 2] != p.k)
    return Status::invalid("MatMul inner dimensions differ: " + shape_str(a_in) + " x " + shape_str(b_in));
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  MOSAIC_ASSIGN_OR_RETURN(p.batch, broadcast_shapes(ab, bb));
  p.a_batch = Shape(p.batch.size() - ab.size(), 1);
  p.a_batch.insert(p.a_batch.end(), ab.begin(), ab.end());
  p.b_batch = Shape(p.batch.size() - bb.size(), 1);
  p.b_batch.insert(p.b_batch.end(), bb.begin(), bb.end());
  p.out = p.batch;
  if (!p.a_is_vector) p.out.push_back(p.m);
  if (!p.b_is_vector) p.out.push_back(p.n);
  return p;
}

Expected<int64_t> normalize_axis(int64_t axis, int64_t rank, const Node& node) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1))
    return Status::invalid(node.label() + ": axis " + std::to_string(axis) + " out of range for rank " +
                           std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

Expected<std::vector<int64_t>> bounded_ints(const Node& n, const char* name, int64_t def, int64_t lo, size_t count) {
  std::vector<int64_t> v = n.has_attr(name) ? n.attr_ints(name) : std::vector<int64_t>(count, def);
  if (v.size() != count)
    return Status::invalid(n.label() + ": " + name + " has " + std::to_string(v.size()) + " values, expected " + std::to_string(count));
  for (int64_t e : v)
    if (e < lo || e > kMaxDim) return Status::invalid(n.label() + ": " + name + " value " + std::to_string(e) + " out of range");
  return v;
}

Expected<PadParams> pad_params(const OpContext& ctx) {
  const Node& node = *ctx.node;
  PadParams p;
  p.mode = node.attr_string("mode", "constant");
  if (p.mode != "constant" && p.mode != "reflect" && p.mode != "edge" && p.mode != "wrap")
    return Status::invalid(node.label() + ": unknown pad mode '" + p.mode + "'");
  if (p.mode == "wrap" && ctx.opset < 19)
    return Status::invalid(node.label() + ": pad mode 'wrap' arrived in opset 19 (the model's is " +
                           std::to_string(ctx.opset) + ")");
  const int64_t r = static_cast<int64_t>(ctx.inputs[0].shape.size());
  if (ctx.opset < 11) {
    p.pads = node.attr_ints("pads");
    p.value = node.attr_float("value", 0.f);
  } else {
    if (!ctx.has_input(1)) return Status::invalid(node.label() + ": missing pads input");
    const Tensor* pads = ctx.constant(1);
    if (!pads) return Status::unsupported(node.label() + ": pads must be a constant (it is computed at run time)");
    p.pads = pads->to_i64_vector();
    if (ctx.has_input(2)) {
      const Tensor* v = ctx.constant(2);
      if (!v) p.value_at_run_time = true;
      else if (v->numel() > 0) p.value = static_cast<float>(v->get(0));
    }
    if (ctx.has_input(3)) {
      const Tensor* axes_t = ctx.constant(3);
      if (!axes_t) return Status::unsupported(node.label() + ": axes must be a constant");
      auto axes = axes_t->to_i64_vector();
      std::vector<int64_t> full(2 * r, 0);
      if (p.pads.size() != 2 * axes.size()) return Status::invalid(node.label() + ": pads do not match axes");
      for (size_t i = 0; i < axes.size(); ++i) {
        MOSAIC_ASSIGN_OR_RETURN(int64_t ax, normalize_axis(axes[i], r, node));
        full[ax] = p.pads[i];
        full[ax + r] = p.pads[i + axes.size()];
      }
      p.pads = full;
    }
  }
  if (static_cast<int64_t>(p.pads.size()) != 2 * r)
    return Status::invalid(node.label() + ": pads has " + std::to_string(p.pads.size()) + " values, expected " +
                           std::to_string(2 * r));
  for (int64_t v : p.pads)
    if (v > kMaxDim || v < -kMaxDim)
      return Status::invalid(node.label() + ": pad " + std::to_string(v) + " is beyond +-(2^31 - 1)");
  return p;
}

ClipParams clip_attr_params(const OpContext& ctx) {
  ClipParams p{-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
  if (ctx.opset < 11) {
    p.lo = ctx.node->attr_float("min", p.lo);
    p.hi = ctx.node->attr_float("max", p.hi);
    return p;
  }
  if (const Tensor* t = ctx.has_input(1) ? ctx.constant(1) : nullptr) p.lo = static_cast<float>(t->get(0));
  if (const Tensor* t = ctx.has_input(2) ? ctx.constant(2) : nullptr) p.hi = static_cast<float>(t->get(0));
  return p;
}

BatchNormParams batch_norm_params(const Node& node, const Shape& x) {
  BatchNormParams p;
  p.batch = x.empty() ? 1 : x[0];
  p.channels = x.size() < 2 ? 1 : x[1];
  p.spatial = shape_numel(x) / std::max<int64_t>(p.batch * p.channels, 1);
  p.epsilon = node.attr_float("epsilon", 1e-5f);
  p.momentum = node.attr_float("momentum", 0.9f);
  return p;
}

Expected<LayerNormParams> layer_norm_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  LayerNormParams p;
  MOSAIC_ASSIGN_OR_RETURN(p.axis, normalize_axis(n.attr_int("axis", -1), r, n));
  for (int64_t i = 0; i < r; ++i) {
    (i < p.axis ? p.outer : p.inner) *= x[i];
    p.stats.push_back(i < p.axis ? x[i] : 1);
  }
  p.epsilon = n.attr_float("epsilon", 1e-5f);
  if (!(p.epsilon >= 0)) return Status::invalid(n.label() + ": epsilon must be >= 0");
  p.has_bias = ctx.has_input(2);
  for (size_t i = 1; i < (p.has_bias ? 3u : 2u); ++i)
    if (ctx.inputs[i].numel() != p.inner)
      return Status::unsupported(n.label() + ": input " + std::to_string(i) + " (" + (i == 1 ? "Scale" : "B") +
                                 ") has shape " + shape_str(ctx.inputs[i].shape) + "; Mosaic needs one value per "
                                 "normalised element (" + std::to_string(p.inner) + ")");
  return p;
}

Expected<SoftmaxParams> softmax_params(const OpContext& ctx) {
  const Shape& x = ctx.inputs[0].shape;
  const int64_t r = static_cast<int64_t>(x.size());
  const bool legacy = ctx.opset < 13;
  MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", legacy ? 1 : -1), r, *ctx.node));
  SoftmaxParams p;
  for (int64_t i = 0; i < axis; ++i) p.outer *= x[i];
  if (legacy) {
    for (int64_t i = axis; i < r; ++i) p.axis_dim *= x[i];
  } else {
    p.axis_dim = x[axis];
    for (int64_t i = axis + 1; i < r; ++i) p.inner *= x[i];
  }
  return p;
}

Expected<LrnParams> lrn_params(const OpContext& ctx) {
  LrnParams p;
  if (!ctx.node->has_attr("size")) return Status::invalid(ctx.node->label() + ": missing attribute size");
  p.size = ctx.node->attr_int("size", 1);
  p.alpha = ctx.node->attr_float("alpha", 1e-4f);
  p.beta = ctx.node->attr_float("beta", 0.75f);
  p.bias = ctx.node->attr_float("bias", 1.f);
  if (p.size < 1) return Status::invalid(ctx.node->label() + ": size must be >= 1");
  if (ctx.inputs[0].shape.size() < 3) return Status::invalid(ctx.node->label() + ": input must be N x C x ...");
  return p;
}

Expected<std::vector<int64_t>> transpose_perm(const OpContext& ctx) {
  const int64_t r = static_cast<int64_t>(ctx.inputs[0].shape.size());
  std::vector<int64_t> perm = ctx.node->attr_ints("perm");
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  if (static_cast<int64_t>(perm.size()) != r) return Status::invalid(ctx.node->label() + ": perm length != rank");
  std::vector<bool> seen(r, false);
  for (auto& p : perm) {
    if (p < 0) p += r;
    if (p < 0 || p >= r || seen[p]) return Status::invalid(ctx.node->label() + ": perm is not a permutation");
    seen[p] = true;
  }
  return perm;
}

Expected<SplitParams> split_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  SplitParams p;
  MOSAIC_ASSIGN_OR_RETURN(p.axis, normalize_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.size()), n));
  const int64_t d = x[static_cast<size_t>(p.axis)];
  const int64_t outputs = static_cast<int64_t>(n.outputs.size());
  if (ctx.has_input(1)) {
    if (ctx.opset < 13) return Status::invalid(n.label() + ": before opset 13 split is an attribute, not an input");
    const Tensor* t = ctx.constant(1);
    if (!t) return Status::unsupported(n.label() + ": the split lengths must be a constant known at load time");
    p.sizes = t->to_i64_vector();
  } else if (n.has_attr("split")) {
    if (ctx.opset >= 13) return Status::invalid(n.label() + ": from opset 13 split is an input, not an attribute");
    p.sizes = n.attr_ints("split");
  } else if (n.has_attr("num_outputs")) {
    const int64_t k = n.attr_int("num_outputs", 0);
    if (k != outputs || k < 1)
      return Status::invalid(n.label() + ": num_outputs " + std::to_string(k) + " but " + std::to_string(outputs) +
                             " outputs");
    const int64_t each = (d + k - 1) / k;
    for (int64_t i = 0; i < k; ++i) p.sizes.push_back(std::max<int64_t>(0, std::min(each, d - i * each)));
  } else {
    if (outputs < 1 || d % outputs != 0)
      return Status::invalid(n.label() + ": axis of " + std::to_string(d) + " does not split into " +
                             std::to_string(outputs) + " equal parts");
    p.sizes.assign(static_cast<size_t>(outputs), d / outputs);
  }
  if (static_cast<int64_t>(p.sizes.size()) != outputs)
    return Status::invalid(n.label() + ": " + std::to_string(p.sizes.size()) + " split lengths for " +
                           std::to_string(outputs) + " outputs");
  int64_t sum = 0;
  for (int64_t v : p.sizes) {
    if (v < 0) return Status::invalid(n.label() + ": negative split length " + std::to_string(v));
    sum += v;
  }
  if (sum != d)
    return Status::invalid(n.label() + ": split lengths sum to " + std::to_string(sum) + ", the axis has " +
                           std::to_string(d));
  return p;
}

}  // namespace mosaic
