// Ops whose output length depends on their inputs' values, selecting slices along an axis:
// Compress (the slices where a bool condition holds; without axis, the flattened elements)
// and Unique (the distinct slices, sorted or in order of first occurrence, with the index
// of each one's first occurrence, every slice's index among them and their counts). With
// their deciding inputs constant, their shapes are planned at load time; otherwise the
// planner plans them from given input values (core/run_time_shape.hpp), as NonZero.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/status.hpp"
#include "ir/tensor.hpp"
#include "operators/op_context.hpp"

namespace mosaic {

struct OpSchema;

/// An input viewed as [outer, length, inner] about the selection's axis (without axis: the
/// flattened elements, [1, numel, 1]).
struct SliceView {
  int64_t outer = 1, length = 0, inner = 1;
  int64_t axis = -1;  ///< -1: flattened
};

/// Compress: the view of its input and the condition's length (which may be shorter than the
/// axis: the slices past it are dropped, as numpy's compress).
struct CompressParams {
  SliceView view;
  int64_t condition_length = 0;
};
Expected<CompressParams> compress_params(const OpContext& ctx);
/// Which slices the condition keeps, in order.
std::vector<int64_t> compress_kept(const CompressParams& p, const Tensor& condition);

struct UniqueParams {
  SliceView view;
  bool sorted = true;
};
Expected<UniqueParams> unique_params(const OpContext& ctx);

/// Unique's answer: per distinct slice (in output order) the index of its first occurrence
/// and its count; per input slice the position of its distinct slice. Slices compare
/// element by element in row-major order, values as numbers (NaN equal to NaN and after
/// every number, as numpy's unique).
struct UniqueSlices {
  std::vector<int64_t> first, counts, inverse;
};
UniqueSlices unique_slices(const UniqueParams& p, const Tensor& x);

/// Copies slices `which` of x (viewed as `v`) into y, in order: [outer, which.size(), inner].
void gather_slices(const SliceView& v, const Tensor& x, const std::vector<int64_t>& which, Tensor* y);

void add_selection_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
