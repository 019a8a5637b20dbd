// Numerical agreement of two tensors of one shape and element type: floats within
// |got - ref| <= atol + rtol * |ref| element-wise (rtol at least 2^-9 for float16 and 2^-6
// for bfloat16, a few units in their last place); integers and bools exactly.
#pragma once

#include <string>

#include "ir/tensor.hpp"

namespace mosaic {

struct Agreement {
  bool ok = true;
  double max_abs = 0;     ///< largest |got - ref|
  double max_rel = 0;     ///< largest |got - ref| / max(|ref|, tiny)
  double rel_l2 = 0;      ///< ||got - ref||_2 / ||ref||_2 (the difference's norm; ||ref|| floored at tiny)
  int64_t worst = -1;     ///< index of the element furthest outside tolerance (or largest error)
  double worst_got = 0, worst_ref = 0;
  std::string message;    ///< why it failed (shape/dtype/NaN/values)
};

Agreement compare_tensors(const Tensor& got, const Tensor& ref, double rtol, double atol);
/// The largest magnitude of a float tensor (0 for an empty one).
double max_abs(const Tensor& t);
/// The share of rows (all axes but the last) whose largest element is at the same index in
/// `got` and `ref` (a classifier's top-1 agreement); -1 when the shapes differ or are empty.
double top1_agreement(const Tensor& got, const Tensor& ref);
/// ||got - ref|| / ||ref|| (Euclidean norms over every element, in double); 0 when both are
/// zero, infinity when only ref is, or when the element counts differ or a value is NaN.
double relative_l2(const Tensor& got, const Tensor& ref);

}  // namespace mosaic
