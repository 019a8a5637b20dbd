// Element-wise ops outside the differentiable tables of operators/eltwise.hpp: rounding
// (Floor, Ceil, Round), Sign, the classifications IsNaN and IsInf, and Mod. One row each:
// name, arity, the dtypes ONNX gives them (float32, int64 or both), whether the result is
// bool; the mathematics below. They have no backward: PyTorch's gradient of each is zero
// almost everywhere, and a training plan through one is refused naming it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace mosaic {

struct OpSchema;

enum class PointwiseOp { kFloor, kCeil, kRound, kSign, kIsNaN, kIsInf, kMod, kCount };

struct PointwiseOpInfo {
  PointwiseOp op;
  const char* name;
  const char* summary;
  int arity;
  bool floats, integers;  ///< the input dtypes it takes: float32, int64
  bool to_bool;           ///< the result is bool (IsNaN, IsInf)
};

// clang-format off
inline constexpr std::array<PointwiseOpInfo, static_cast<size_t>(PointwiseOp::kCount)> kPointwiseOps = {{
    {PointwiseOp::kFloor, "Floor", "largest integer <= x", 1, true, false, false},
    {PointwiseOp::kCeil, "Ceil", "smallest integer >= x", 1, true, false, false},
    {PointwiseOp::kRound, "Round", "nearest integer, halves to even", 1, true, false, false},
    {PointwiseOp::kSign, "Sign", "-1, 0 or 1 (NaN stays NaN)", 1, true, true, false},
    {PointwiseOp::kIsNaN, "IsNaN", "x is NaN, to bool", 1, true, false, true},
    {PointwiseOp::kIsInf, "IsInf", "x is +inf or -inf (detect_positive, detect_negative), to bool", 1, true, false, true},
    {PointwiseOp::kMod, "Mod", "a mod b: the divisor's sign (fmod = 0) or the dividend's (fmod = 1), "
                               "numpy broadcasting", 2, true, true, false},
}};
// clang-format on

constexpr bool pointwise_rows_in_enum_order() {
  for (size_t i = 0; i < kPointwiseOps.size(); ++i)
    if (kPointwiseOps[i].op != static_cast<PointwiseOp>(i)) return false;
  return true;
}
static_assert(pointwise_rows_in_enum_order(), "kPointwiseOps: one row per PointwiseOp, in enum order");

inline std::optional<PointwiseOp> pointwise_op_of(std::string_view op_type) {
  for (const auto& p : kPointwiseOps)
    if (op_type == p.name) return p.op;
  return std::nullopt;
}
inline const PointwiseOpInfo& pointwise_info(PointwiseOp op) { return kPointwiseOps[static_cast<size_t>(op)]; }

/// The attributes the ops read: IsInf's detections, Mod's fmod.
struct PointwiseArgs {
  bool detect_positive = true, detect_negative = true;
  bool fmod = false;
};

/// The op on float32 (IsNaN and IsInf: 1 or 0). Round uses the current rounding mode, C's
/// default round-half-to-even, as ONNX specifies.
inline float pointwise_forward(PointwiseOp op, float a, float b, const PointwiseArgs& args) {
  switch (op) {
    case PointwiseOp::kFloor: return std::floor(a);
    case PointwiseOp::kCeil: return std::ceil(a);
    case PointwiseOp::kRound: return std::nearbyint(a);
    case PointwiseOp::kSign: return a > 0 ? 1.f : a < 0 ? -1.f : a;  // 0, -0 and NaN as they are
    case PointwiseOp::kIsNaN: return std::isnan(a) ? 1.f : 0.f;
    case PointwiseOp::kIsInf:
      return (std::isinf(a) && ((a > 0 && args.detect_positive) || (a < 0 && args.detect_negative))) ? 1.f : 0.f;
    case PointwiseOp::kMod: {  // fmod = 0: numpy's mod, the divisor's sign
      const float r = std::fmod(a, b);
      return !args.fmod && r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
    }
    case PointwiseOp::kCount: break;
  }
  return 0.f;
}

/// The op on int64. Mod by 0 gives 0 (ONNX leaves it undefined; C++ traps); fmod = 0 takes
/// the divisor's sign (Python's %), fmod = 1 the dividend's (C's %).
inline int64_t pointwise_forward(PointwiseOp op, int64_t a, int64_t b, const PointwiseArgs& args) {
  switch (op) {
    case PointwiseOp::kSign: return a > 0 ? 1 : a < 0 ? -1 : 0;
    case PointwiseOp::kMod: {
      if (b == 0 || b == -1) return 0;  // INT64_MIN % -1 overflows in C++
      int64_t r = a % b;
      if (!args.fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
    default: return 0;
  }
}

/// Adds the rows' schemas to the table (operators/schemas.cpp calls it).
void add_pointwise_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
