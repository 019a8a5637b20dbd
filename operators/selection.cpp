#include "operators/selection.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "ir/elements.hpp"
#include "operators/params.hpp"
#include "operators/schema.hpp"

namespace mosaic {
namespace {

using Descs = std::vector<TensorDesc>;

/// The view about attribute `axis`, or flattened where the node has none.
Expected<SliceView> slice_view(const OpContext& ctx) {
  const Node& n = *ctx.node;
  const Shape& x = ctx.inputs[0].shape;
  SliceView v;
  if (!n.has_attr("axis")) {
    v.length = shape_numel(x);
    return v;
  }
  MOSAIC_ASSIGN_OR_RETURN(v.axis, normalize_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.size()), n));
  for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
    if (d < v.axis) v.outer *= x[static_cast<size_t>(d)];
    else if (d > v.axis) v.inner *= x[static_cast<size_t>(d)];
  }
  v.length = x[static_cast<size_t>(v.axis)];
  return v;
}

/// x's shape with the view's axis (or the flattened elements) `count` long.
Shape selected_shape(const SliceView& v, const Shape& x, int64_t count) {
  if (v.axis < 0) return {count};
  Shape s = x;
  s[static_cast<size_t>(v.axis)] = count;
  return s;
}

Status selectable(const OpContext& c) {
  if (dtype_packed_bits(c.inputs[0].dtype))
    return Status::unsupported(c.node->label() + ": " + c.node->op_type + " of " + dtype_name(c.inputs[0].dtype) +
                               " (Mosaic does not address the packed 4- and 2-bit types by element)");
  return Status::ok();
}

Expected<Descs> infer_compress(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(selectable(c));
  MOSAIC_ASSIGN_OR_RETURN(CompressParams p, compress_params(c));
  const Tensor* condition = c.constant(1);
  if (!condition)
    return Status::unsupported(c.node->label() + ": its output's length (how many slices the condition keeps) "
                                                 "depends on condition's values");
  const auto kept = static_cast<int64_t>(compress_kept(p, *condition).size());
  return Descs{{c.inputs[0].dtype, selected_shape(p.view, c.inputs[0].shape, kept)}};
}

Expected<Descs> infer_unique(const OpContext& c) {
  MOSAIC_RETURN_IF_ERROR(selectable(c));
  MOSAIC_ASSIGN_OR_RETURN(UniqueParams p, unique_params(c));
  const Tensor* x = c.constant(0);
  if (!x)
    return Status::unsupported(c.node->label() + ": its outputs' length (how many distinct " +
                               (p.view.axis < 0 ? "values" : "slices") + " X holds) depends on X's values");
  const auto count = static_cast<int64_t>(unique_slices(p, *x).first.size());
  return Descs{{c.inputs[0].dtype, selected_shape(p.view, c.inputs[0].shape, count)},
               {DType::kI64, {count}},
               {DType::kI64, {p.view.length}},
               {DType::kI64, {count}}};
}

// Comparisons: about log2(n) per slice element for the sort.
double f_unique(const OpContext& c) {
  const double n = static_cast<double>(c.inputs[0].numel());
  return n * std::max(1.0, std::log2(std::max(2.0, n)));
}
double f_zero(const OpContext&) { return 0; }

/// -1, 0 or 1: element a of x against element b, NaN equal to NaN and after every number.
int compare_elements(const Tensor& x, bool integral, int64_t a, int64_t b) {
  if (integral) {
    const int64_t u = x.get_i64(a), v = x.get_i64(b);
    return u < v ? -1 : u > v ? 1 : 0;
  }
  const double u = x.get(a), v = x.get(b);
  const bool nu = std::isnan(u), nv = std::isnan(v);
  if (nu || nv) return nu == nv ? 0 : nu ? 1 : -1;
  return u < v ? -1 : u > v ? 1 : 0;
}

}  // namespace

Expected<CompressParams> compress_params(const OpContext& ctx) {
  const Node& n = *ctx.node;
  MOSAIC_ASSIGN_OR_RETURN(SliceView v, slice_view(ctx));
  const TensorDesc& cond = ctx.inputs[1];
  if (cond.dtype != DType::kBool || cond.shape.size() != 1)
    return Status::invalid(n.label() + ": condition must be a 1-D bool tensor, got " + dtype_name(cond.dtype) + " " +
                           shape_str(cond.shape));
  if (cond.shape[0] > v.length)
    return Status::invalid(n.label() + ": condition has " + std::to_string(cond.shape[0]) + " values for " +
                           std::to_string(v.length) + (v.axis < 0 ? " elements" : " slices along axis " + std::to_string(v.axis)));
  return CompressParams{v, cond.shape[0]};
}

std::vector<int64_t> compress_kept(const CompressParams& p, const Tensor& condition) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < p.condition_length; ++i)
    if (condition.get_i64(i) != 0) kept.push_back(i);
  return kept;
}

Expected<UniqueParams> unique_params(const OpContext& ctx) {
  UniqueParams p;
  MOSAIC_ASSIGN_OR_RETURN(p.view, slice_view(ctx));
  if (ctx.inputs[0].dtype == DType::kU64)
    return Status::unsupported(ctx.node->label() + ": Unique of uint64 (Mosaic compares values as int64 or double)");
  p.sorted = ctx.node->attr_int("sorted", 1) != 0;
  return p;
}

UniqueSlices unique_slices(const UniqueParams& p, const Tensor& x) {
  const SliceView& v = p.view;
  const bool integral = !dtype_is_float(x.dtype());
  // Slice s, element k (row-major over the other axes: outer, then inner).
  auto at = [&](int64_t s, int64_t k) { return (k / v.inner * v.length + s) * v.inner + k % v.inner; };
  const int64_t width = v.outer * v.inner;
  auto compare = [&](int64_t a, int64_t b) {
    for (int64_t k = 0; k < width; ++k)
      if (int c = compare_elements(x, integral, at(a, k), at(b, k))) return c;
    return 0;
  };
  std::vector<int64_t> order(static_cast<size_t>(v.length));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
  // Runs of equal slices: each run's first member is its first occurrence (a stable sort).
  UniqueSlices u;
  std::vector<int64_t> run_of(static_cast<size_t>(v.length));
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || compare(order[i - 1], order[i]) != 0) {
      u.first.push_back(order[i]);
      u.counts.push_back(0);
    }
    ++u.counts.back();
    run_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(u.first.size()) - 1;
  }
  std::vector<int64_t> position(u.first.size());
  std::iota(position.begin(), position.end(), 0);
  if (!p.sorted) {  // the runs in order of first occurrence
    std::vector<int64_t> by_first(u.first.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return u.first[a] < u.first[b]; });
    UniqueSlices r;
    for (size_t i = 0; i < by_first.size(); ++i) {
      r.first.push_back(u.first[static_cast<size_t>(by_first[i])]);
      r.counts.push_back(u.counts[static_cast<size_t>(by_first[i])]);
      position[static_cast<size_t>(by_first[i])] = static_cast<int64_t>(i);
    }
    u.first.swap(r.first);
    u.counts.swap(r.counts);
  }
  u.inverse.resize(static_cast<size_t>(v.length));
  for (int64_t s = 0; s < v.length; ++s) u.inverse[static_cast<size_t>(s)] = position[static_cast<size_t>(run_of[s])];
  return u;
}

void gather_slices(const SliceView& v, const Tensor& x, const std::vector<int64_t>& which, Tensor* y) {
  const size_t es = dtype_size(x.dtype());
  const auto row = static_cast<size_t>(v.inner) * es;
  const auto* in = static_cast<const char*>(x.data());
  auto* out = static_cast<char*>(y->data());
  const auto count = static_cast<int64_t>(which.size());
  for (int64_t o = 0; o < v.outer; ++o)
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(out + static_cast<size_t>(o * count + i) * row,
                  in + static_cast<size_t>(o * v.length + which[static_cast<size_t>(i)]) * row, row);
}

void add_selection_schemas(std::map<std::string, OpSchema>& t) {
  OpSchema& c = add_schema(t, "Compress", 2, 2, infer_compress, f_zero,
                           "the slices along axis (or flattened elements) where condition is true");
  c.non_trainable_inputs = {1};
  c.backward_flops = nullptr;
  OpSchema& u = add_schema(t, "Unique", 1, 1, infer_unique, f_unique,
                           "distinct values or slices (sorted or in order of occurrence), first indices, inverse, counts");
  u.max_outputs = 4;
  u.backward_flops = nullptr;
}

}  // namespace mosaic
