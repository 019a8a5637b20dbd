// Numerical agreement of two tensors: |got - ref| <= atol + rtol * |ref| element-wise.
#pragma once

#include <string>

#include "core/tensor.hpp"

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

}  // namespace mosaic
