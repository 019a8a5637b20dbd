// The reductions' attributes and shapes (operators/reduce.hpp).
#include "operators/reduce.hpp"

#include <algorithm>

#include "operators/op_context.hpp"
#include "operators/params.hpp"

namespace mosaic {

Expected<ReduceParams> reduce_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const ReduceOpInfo& info = reduce_info(*reduce_op_of(n.op_type));
  ReduceParams p;
  p.in = ctx.inputs[0].shape;
  const int64_t rank = static_cast<int64_t>(p.in.size());
  std::vector<int64_t> axes;
  bool given = false;
  if (ctx.opset >= info.axes_input_since) {
    if (n.has_attr("axes"))
      return Status::invalid(n.label() + ": from opset " + std::to_string(info.axes_input_since) + " " + n.op_type +
                             " takes its axes as an input, not an attribute");
    if (ctx.has_input(1)) {
      const Tensor* t = ctx.constant(1);
      if (!t) return Status::unsupported(n.label() + ": the axes must be a constant known at load time");
      axes = t->to_i64_vector();
      given = true;
    }
  } else {
    if (ctx.has_input(1))
      return Status::invalid(n.label() + ": before opset " + std::to_string(info.axes_input_since) + " " + n.op_type +
                             " takes its axes as an attribute");
    if (n.has_attr("axes")) {
      axes = n.attr_ints("axes");
      given = true;
    }
  }
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  if (given && axes.empty() && n.attr_int("noop_with_empty_axes", 0) != 0) {
    p.kept = p.out = p.in;  // the identity
    return p;
  }
  if (!given || axes.empty()) {
    axes.clear();
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  std::vector<bool> reduced(p.in.size(), false);
  for (int64_t a : axes) {
    MOSAIC_ASSIGN_OR_RETURN(const int64_t ax, normalize_axis(a, rank, n));
    if (reduced[ax]) return Status::invalid(n.label() + ": axis " + std::to_string(a) + " is given twice");
    reduced[ax] = true;
  }
  for (int64_t a = 0; a < rank; ++a) {
    if (reduced[a]) p.axes.push_back(a);
    p.kept.push_back(reduced[a] ? 1 : p.in[a]);
    if (reduced[a]) p.count *= static_cast<double>(p.in[a]);
    if (!reduced[a] || keepdims) p.out.push_back(p.kept.back());
  }
  return p;
}

}  // namespace mosaic
