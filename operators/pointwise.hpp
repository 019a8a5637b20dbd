// Element-wise ops outside the differentiable tables of operators/eltwise.hpp: rounding
// (Floor, Ceil, Round), Sign, the classifications IsNaN and IsInf, Mod, and the bit ops
// (BitShift, BitwiseAnd/Or/Xor/Not), and the activations without a backward here (PRelu,
// Shrink, SwiGLU). One row each: name, arity, the dtypes ONNX gives them
// (floats, integers or both), whether the result is bool, whether it works on an integer's
// bits (then uint64 too, exactly); the mathematics below. They have no backward: PyTorch's gradient of each is zero
// almost everywhere, and a training plan through one is refused naming it.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ir/tensor.hpp"

namespace mosaic {

struct OpSchema;

enum class PointwiseOp {
  kFloor, kCeil, kRound, kSign, kIsNaN, kIsInf, kMod, kBitShift, kBitwiseAnd, kBitwiseOr, kBitwiseXor, kBitwiseNot,
  kPRelu, kShrink, kSwiGLU,
  kCount
};

struct PointwiseOpInfo {
  PointwiseOp op;
  const char* name;
  const char* summary;
  int arity;
  bool floats, integers;  ///< the input dtypes it takes: floats, integers
  bool to_bool;           ///< the result is bool (IsNaN, IsInf)
  /// Works on the 64 bits of an integer (computed on int64, uint64 as its bits): exact for
  /// every integer type, narrower ones widened and wrapped back (core/promote.hpp).
  bool bits;
};

// clang-format off
inline constexpr std::array<PointwiseOpInfo, static_cast<size_t>(PointwiseOp::kCount)> kPointwiseOps = {{
    {PointwiseOp::kFloor, "Floor", "largest integer <= x", 1, true, false, false, false},
    {PointwiseOp::kCeil, "Ceil", "smallest integer >= x", 1, true, false, false, false},
    {PointwiseOp::kRound, "Round", "nearest integer, halves to even", 1, true, false, false, false},
    {PointwiseOp::kSign, "Sign", "-1, 0 or 1 (NaN stays NaN)", 1, true, true, false, false},
    {PointwiseOp::kIsNaN, "IsNaN", "x is NaN, to bool", 1, true, false, true, false},
    {PointwiseOp::kIsInf, "IsInf", "x is +inf or -inf (detect_positive, detect_negative), to bool", 1, true, false, true, false},
    {PointwiseOp::kMod, "Mod", "a mod b: the divisor's sign (fmod = 0) or the dividend's (fmod = 1), "
                               "numpy broadcasting", 2, true, true, false, false},
    {PointwiseOp::kBitShift, "BitShift", "a << b or a >> b (direction LEFT or RIGHT; signed "
                                         "types shift right arithmetically); shifts past the width give 0 or -1", 2, false, true, false, true},
    {PointwiseOp::kBitwiseAnd, "BitwiseAnd", "a & b", 2, false, true, false, true},
    {PointwiseOp::kBitwiseOr, "BitwiseOr", "a | b", 2, false, true, false, true},
    {PointwiseOp::kBitwiseXor, "BitwiseXor", "a ^ b", 2, false, true, false, true},
    {PointwiseOp::kBitwiseNot, "BitwiseNot", "~a", 1, false, true, false, true},
    {PointwiseOp::kPRelu, "PRelu", "x if x >= 0 else slope * x, slope broadcast onto x", 2, true, true, false, false},
    {PointwiseOp::kShrink, "Shrink", "x + bias if x < -lambd, x - bias if x > lambd, else 0", 1, true, true, false, false},
    {PointwiseOp::kSwiGLU, "SwiGLU", "a * sigmoid(alpha * a) * b", 2, true, false, false, false},
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

/// The attributes the ops read: IsInf's detections, Mod's fmod, BitShift's direction.
struct PointwiseArgs {
  bool detect_positive = true, detect_negative = true;
  bool fmod = false;
  bool shift_left = true;
  bool unsigned64 = false;  ///< the int64 values are uint64's bits: RIGHT shifts in zeros
  double bias = 0, lambd = 0.5;  ///< Shrink's
  double alpha = 1;              ///< SwiGLU's
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
    case PointwiseOp::kPRelu: return a < 0 ? b * a : a;
    case PointwiseOp::kShrink:
      return a < -args.lambd ? static_cast<float>(a + args.bias) : a > args.lambd ? static_cast<float>(a - args.bias) : 0.f;
    case PointwiseOp::kSwiGLU: return static_cast<float>(a / (1 + std::exp(-args.alpha * a)) * b);
    case PointwiseOp::kBitShift:  // integers only (the schema refuses floats)
    case PointwiseOp::kBitwiseAnd:
    case PointwiseOp::kBitwiseOr:
    case PointwiseOp::kBitwiseXor:
    case PointwiseOp::kBitwiseNot:
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
    case PointwiseOp::kBitShift: {
      // Signed values (int8..int64, and narrower unsigned ones widened, never negative)
      // shift right arithmetically; a shift count of the width or more, or a negative one
      // (read unsigned), leaves 0, or -1 for a negative value shifted right. Widened values
      // wrap back to their width, where a left shift by 8..63 of an int8 leaves 0 as well.
      const auto u = static_cast<uint64_t>(a), s = static_cast<uint64_t>(b);
      if (args.shift_left) return s >= 64 ? 0 : static_cast<int64_t>(u << s);
      if (args.unsigned64) return s >= 64 ? 0 : static_cast<int64_t>(u >> s);
      if (s >= 64) return a < 0 ? -1 : 0;
      return a < 0 ? ~(~a >> s) : a >> s;  // arithmetic, without >> of a negative value
    }
    case PointwiseOp::kBitwiseAnd: return a & b;
    case PointwiseOp::kBitwiseOr: return a | b;
    case PointwiseOp::kBitwiseXor: return a ^ b;
    case PointwiseOp::kBitwiseNot: return ~a;
    case PointwiseOp::kPRelu: return a < 0 ? static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)) : a;
    case PointwiseOp::kShrink: {  // in double, as ONNX's float bias and lambd ask, then truncated
      const double x = static_cast<double>(a);
      return x < -args.lambd ? saturate_to_i64(x + args.bias) : x > args.lambd ? saturate_to_i64(x - args.bias) : 0;
    }
    default: return 0;
  }
}

/// Adds the rows' schemas to the table (operators/schemas.cpp calls it).
void add_pointwise_schemas(std::map<std::string, OpSchema>& table);

}  // namespace mosaic
