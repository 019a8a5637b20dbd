#include "operators/grid_sample.hpp"

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

void add_grid_sample_schema(std::map<std::string, OpSchema>& table) {
  OpSchema& s = add_schema(table, "GridSample", 2, 2, infer_grid_sample, f_grid_sample,
                           "X sampled at grid's normalised coordinates (nearest/linear/cubic, zeros/border/reflection)");
  s.backward_flops = nullptr;
}

}  // namespace mosaic
