#include "metrics/compare.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace mosaic {

Agreement compare_tensors(const Tensor& got, const Tensor& ref, double rtol, double atol) {
  Agreement a;
  if (got.shape() != ref.shape()) {
    a.ok = false;
    a.message = "shape " + shape_str(got.shape()) + " != expected " + shape_str(ref.shape());
    return a;
  }
  if (got.dtype() != ref.dtype()) {
    a.ok = false;
    a.message = std::string("element type ") + dtype_name(got.dtype()) + " != expected " + dtype_name(ref.dtype());
    return a;
  }
  // Integers and bools must match exactly (a tolerance would pass an index one off), compared
  // as integers (a double rounds past 2^53).
  if (!dtype_is_float(ref.dtype())) {
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const int64_t g = got.get_i64(i), r = ref.get_i64(i);
      const double err = std::fabs(static_cast<double>(g) - static_cast<double>(r));
      a.max_abs = std::max(a.max_abs, err);
      if (g != r && a.ok) {
        a.ok = false;
        a.worst = i;
        a.worst_got = static_cast<double>(g);
        a.worst_ref = static_cast<double>(r);
        a.message = "element " + std::to_string(i) + ": got " + std::to_string(g) + ", expected " + std::to_string(r);
      }
    }
    return a;
  }
  // float16 and bfloat16 hold 11 and 8 significant bits: two implementations that round
  // inside an op at different points (a float32 accumulator against a float16 one) differ by
  // a unit or two in the last place, so the relative tolerance is at least 4 and 2 units of
  // the type's epsilon (2^-9, 2^-6).
  if (ref.dtype() == DType::kF16) rtol = std::max(rtol, 1.0 / 512);
  if (ref.dtype() == DType::kBF16) rtol = std::max(rtol, 1.0 / 64);
  double worst_excess = -1, diff2 = 0, ref2 = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.get(i), r = ref.get(i);
    if (std::isfinite(g) && std::isfinite(r)) {
      diff2 += (g - r) * (g - r);
      ref2 += r * r;
    }
    if (std::isnan(r) && std::isnan(g)) continue;
    if (std::isinf(r) && g == r) continue;
    const double err = std::fabs(g - r);
    // A non-finite value on either side that is not the same non-finite value is a mismatch
    // whatever the tolerance: -inf against -3.4e38 has err = inf and a tolerance of inf
    // (rtol * |r|), and inf - inf is NaN, which no comparison would flag.
    const bool non_finite = !std::isfinite(g) || !std::isfinite(r);
    const double excess = non_finite || std::isnan(err) ? INFINITY : err - (atol + rtol * std::fabs(r));
    if (!(err <= a.max_abs)) a.max_abs = std::isnan(err) ? INFINITY : err;
    a.max_rel = std::max(a.max_rel, err / std::max(std::fabs(r), 1e-12));
    if (excess > worst_excess) {
      worst_excess = excess;
      a.worst = i;
      a.worst_got = g;
      a.worst_ref = r;
    }
  }
  a.rel_l2 = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
  if (worst_excess > 0) {
    a.ok = false;
    std::ostringstream os;
    os << "element " << a.worst << ": got " << a.worst_got << ", expected " << a.worst_ref << " (max abs err "
       << a.max_abs << ")";
    a.message = os.str();
  }
  return a;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(t.get(i))));
  return m;
}

double top1_agreement(const Tensor& got, const Tensor& ref) {
  if (got.shape() != ref.shape() || got.shape().empty() || got.numel() == 0) return -1;
  const int64_t k = got.shape().back(), rows = got.numel() / k;
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t a = 0, b = 0;
    for (int64_t j = 1; j < k; ++j) {
      if (got.get(r * k + j) > got.get(r * k + a)) a = j;
      if (ref.get(r * k + j) > ref.get(r * k + b)) b = j;
    }
    same += a == b;
  }
  return static_cast<double>(same) / static_cast<double>(rows);
}

double relative_l2(const Tensor& got, const Tensor& ref) {
  if (got.numel() != ref.numel()) return INFINITY;
  double d2 = 0, r2 = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.get(i), d = static_cast<double>(got.get(i)) - r;
    d2 += d * d;
    r2 += r * r;
  }
  if (std::isnan(d2) || std::isnan(r2)) return INFINITY;
  if (r2 == 0) return d2 == 0 ? 0.0 : INFINITY;
  return std::sqrt(d2 / r2);
}

}  // namespace mosaic
