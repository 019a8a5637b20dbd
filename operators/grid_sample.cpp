#include "operators/grid_sample.hpp"

#include "ir/checked.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

Expected<std::vector<TensorDesc>> infer_grid_sample(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype) || !dtype_is_float(c.inputs[1].dtype))
    return Status::unsupported(c.node->label() + ": GridSample takes floating-point X and grid");
  MOSAIC_ASSIGN_OR_RETURN(GridSampleParams p, grid_sample_params(c));
  Shape out{p.n, p.c};
  out.insert(out.end(), p.out.begin(), p.out.end());
  return std::vector<TensorDesc>{{c.inputs[0].dtype, out}};
}

// Per output element: the coordinates (a few FLOPs) and 2^k (linear) or 4^k (cubic) taps.
double f_grid_sample(const OpContext& c) {
  auto p = grid_sample_params(c);
  if (!p.ok()) return 0;
  const double taps = p->mode == GridMode::kNearest ? 1 : p->mode == GridMode::kLinear ? 2 : 4;
  double per = 1;
  for (size_t d = 0; d < p->in.size(); ++d) per *= taps;
  return static_cast<double>(c.outputs.empty() ? 0 : c.outputs[0].numel()) * (2 * per + 6);
}

}  // namespace

Expected<GridSampleParams> grid_sample_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape &x = ctx.inputs[0].shape, &g = ctx.inputs[1].shape;
  if (x.size() < 4 || x.size() > 5 || g.size() != x.size() || g[0] != x[0] || g.back() != static_cast<int64_t>(x.size()) - 2)
    return Status::invalid(n.label() + ": X " + shape_str(x) + " and grid " + shape_str(g) +
                           " must be [N, C, D1..Dk] and [N, O1..Ok, k], k 2 or 3");
  GridSampleParams p;
  p.n = x[0];
  p.c = x[1];
  p.in.assign(x.begin() + 2, x.end());
  p.out.assign(g.begin() + 1, g.end() - 1);
  const std::string mode = n.attr_string("mode", ctx.opset >= 20 ? "linear" : "bilinear");
  if (mode == "nearest") p.mode = GridMode::kNearest;
  else if (mode == "linear" || mode == "bilinear") p.mode = GridMode::kLinear;
  else if (mode == "cubic" || mode == "bicubic") p.mode = GridMode::kCubic;
  else return Status::invalid(n.label() + ": mode '" + mode + "' (nearest, linear, cubic)");
  const std::string pad = n.attr_string("padding_mode", "zeros");
  if (pad == "zeros") p.padding = GridPadding::kZeros;
  else if (pad == "border") p.padding = GridPadding::kBorder;
  else if (pad == "reflection") p.padding = GridPadding::kReflection;
  else return Status::invalid(n.label() + ": padding_mode '" + pad + "' (zeros, border, reflection)");
  p.align_corners = n.attr_int("align_corners", 0) != 0;
  if (p.mode == GridMode::kCubic && p.in.size() == 3)
    return Status::invalid(n.label() + ": cubic mode takes 2-D inputs only");
  return p;
}

Expected<AffineGridParams> affine_grid_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Tensor* size = ctx.constant(1);
  if (!size) return Status::unsupported(n.label() + ": size must be a constant known at load time");
  const Shape& theta = ctx.inputs[0].shape;
  if (!is_index_dtype(size->dtype()) || (size->numel() != 4 && size->numel() != 5))
    return Status::invalid(n.label() + ": size must be int64 [N, C, H, W] or [N, C, D, H, W]");
  AffineGridParams p;
  const std::vector<int64_t> s = size->to_i64_vector();
  for (int64_t e : s)
    if (e < 0 || e > kMaxDim) return Status::invalid(n.label() + ": size value " + std::to_string(e) + " outside [0, 2^31 - 1]");
  p.n = s[0];
  p.spatial.assign(s.begin() + 2, s.end());
  const int64_t k = static_cast<int64_t>(p.spatial.size());
  if (theta != Shape{p.n, k, k + 1})
    return Status::invalid(n.label() + ": theta " + shape_str(theta) + " must be [" + std::to_string(p.n) + ", " +
                           std::to_string(k) + ", " + std::to_string(k + 1) + "] for size " + shape_str(Shape(s)));
  Shape grid{p.n, k};
  grid.insert(grid.end(), p.spatial.begin(), p.spatial.end());
  if (shape_numel(grid) > kMaxTensorBytes) return Status::invalid(n.label() + ": grid " + shape_str(grid) + " too large");
  p.align_corners = n.attr_int("align_corners", 0) != 0;
  return p;
}

double affine_grid_coordinate(int64_t i, int64_t size, bool align_corners) {
  if (size <= 1) return 0.0;
  const double x = static_cast<double>(i), s = static_cast<double>(size);
  return align_corners ? -1.0 + 2.0 * x / (s - 1) : -1.0 + (2.0 * x + 1) / s;
}

namespace {

Expected<std::vector<TensorDesc>> infer_affine_grid(const OpContext& c) {
  if (!dtype_is_float(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": AffineGrid takes a floating-point theta");
  MOSAIC_ASSIGN_OR_RETURN(AffineGridParams p, affine_grid_params(c));
  Shape out{p.n};
  out.insert(out.end(), p.spatial.begin(), p.spatial.end());
  out.push_back(static_cast<int64_t>(p.spatial.size()));
  return std::vector<TensorDesc>{{c.inputs[0].dtype, out}};
}

// Per point and output coordinate, k multiply-adds and the offset.
double f_affine_grid(const OpContext& c) {
  const double points = c.outputs.empty() ? 0 : static_cast<double>(c.outputs[0].numel());
  const double k = c.inputs[0].shape.size() == 3 ? static_cast<double>(c.inputs[0].shape[1]) : 0;
  return points * 2 * (k + 1);
}

}  // namespace

void add_grid_sample_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& a = add_schema(table, "AffineGrid", 2, 2, infer_affine_grid, f_affine_grid,
                           "the sampling grid of an affine transform theta over size's normalised coordinates");
  a.shape_inputs = {1};
  a.non_trainable_inputs = {1};
  a.backward_flops = nullptr;
  OpSchema& s = add_schema(table, "GridSample", 2, 2, infer_grid_sample, f_grid_sample,
                           "X sampled at grid's normalised coordinates (nearest/linear/cubic, zeros/border/reflection)");
  s.backward_flops = nullptr;
}

}  // namespace mosaic
