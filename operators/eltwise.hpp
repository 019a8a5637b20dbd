// The element-wise ops, each defined once: one row of kUnaryOps or kBinaryOps holds the op's
// ONNX name, its mathematics (forward, derivatives with PyTorch's conventions at kinks, the
// kinks themselves and the pieces that meet there), what its backward reads, its FLOPs and
// its arity. Everything else reads the rows:
//   - the schema (operators/schemas.cpp builds one per row: arity, shape inference, FLOPs);
//   - the naive oracle and gradcheck's double-precision reference (the row's functions);
//   - im2col, which vectorises the common ops and runs the row's rules for the others;
//   - onednn and torch, which map an op to their library's algorithm where one exists and
//     otherwise decline it (the planner places the node elsewhere and says why);
//   - the fusion pass and the fused-activation attribute (Activation, operators/params.hpp);
//   - verify --per-node's kink handling.
// Adding an op: an enum value, a row (in enum order: a static_assert checks; complete: a
// test checks), test cases.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace mosaic {

struct OpContext;

/// The attributes a unary op reads (each op's defaults are in unary_args()), and its
/// bounds: Clip's lo and hi.
struct UnaryArgs {
  double alpha = 0, beta = 0, gamma = 0;
  double lo = -INFINITY, hi = INFINITY;
  bool tanh = false;  ///< Gelu's approximate = "tanh"
};

enum class UnaryOp {
  kRelu, kLeakyRelu, kSigmoid, kTanh, kClip, kExp, kLog, kSqrt, kErf, kNeg, kAbs, kReciprocal,
  kSoftplus, kSoftsign, kElu, kSelu, kHardSigmoid, kHardSwish, kGelu, kSin, kCos,
  kTan, kSinh, kCosh, kAsin, kAcos, kAtan, kAsinh, kAcosh, kAtanh, kMish, kCelu, kSwish,
  kThresholdedRelu,
  kCount  // not an op: the number of ops
};

struct UnaryOpInfo {
  UnaryOp op;
  const char* name;     ///< the ONNX op type
  const char* summary;  ///< the formula, as the schema lists it
  int max_inputs;       ///< 1; Clip 3 (its bounds, never trained)
  /// What the backward rule reads of the forward tensors (the plan frees the others).
  bool backward_reads_input, backward_reads_output;
  double flops, backward_flops;  ///< per element (docs/metrics.md)
  double (*f)(double x, const UnaryArgs&);
  /// dy/dx at x, y = f(x); at a kink, PyTorch's choice.
  double (*df)(double x, double y, const UnaryArgs&);
  /// Where the derivative jumps: `kinks` points, kink(k, args) ascending. piece(k, above, x)
  /// is the formula of the piece on that side of kink k, continued to x (gradcheck
  /// evaluates both when a finite-difference step may cross).
  int kinks;
  double (*kink)(int k, const UnaryArgs&);
  double (*piece)(int k, bool above, double x, const UnaryArgs&);
  /// The fusion pass may fold it into a preceding Conv or Gemm (inference).
  bool fusable;
};

namespace eltwise_detail {
constexpr double kSqrt2 = 1.41421356237309504880, kSqrtPi = 1.77245385090551602730;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline double gelu_inner(double x) { return kSqrt2OverPi * (x + 0.044715 * x * x * x); }
inline double hard_sigmoid(double x, const UnaryArgs& a) { return std::fmax(0.0, std::fmin(1.0, a.alpha * x + a.beta)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace eltwise_detail

// clang-format off
inline constexpr std::array<UnaryOpInfo, static_cast<size_t>(UnaryOp::kCount)> kUnaryOps = {{
    {UnaryOp::kRelu, "Relu", "max(x, 0)", 1, false, true, 1, 1,
     [](double x, const UnaryArgs&) { return x > 0 ? x : 0.0; },
     [](double, double y, const UnaryArgs&) { return y > 0 ? 1.0 : 0.0; },  // y > 0 exactly where x > 0
     1, [](int, const UnaryArgs&) { return 0.0; },
     [](int, bool above, double x, const UnaryArgs&) { return above ? x : 0.0; }, true},
    {UnaryOp::kLeakyRelu, "LeakyRelu", "x if x >= 0 else alpha * x", 1, true, false, 1, 1,
     [](double x, const UnaryArgs& a) { return x >= 0 ? x : a.alpha * x; },
     [](double x, double, const UnaryArgs& a) { return x > 0 ? 1.0 : a.alpha; },
     1, [](int, const UnaryArgs&) { return 0.0; },
     [](int, bool above, double x, const UnaryArgs& a) { return above ? x : a.alpha * x; }, true},
    {UnaryOp::kSigmoid, "Sigmoid", "1 / (1 + exp(-x))", 1, false, true, 4, 3,
     [](double x, const UnaryArgs&) { return eltwise_detail::sigmoid(x); },
     [](double, double y, const UnaryArgs&) { return y * (1 - y); }, 0, nullptr, nullptr, false},
    {UnaryOp::kTanh, "Tanh", "tanh(x)", 1, false, true, 4, 3,
     [](double x, const UnaryArgs&) { return std::tanh(x); },
     [](double, double y, const UnaryArgs&) { return 1 - y * y; }, 0, nullptr, nullptr, false},
    {UnaryOp::kClip, "Clip", "min(max(x, lo), hi)", 3, true, false, 1, 1,
     [](double x, const UnaryArgs& a) { return std::fmin(std::fmax(x, a.lo), a.hi); },
     [](double x, double, const UnaryArgs& a) { return x >= a.lo && x <= a.hi ? 1.0 : 0.0; },  // torch.clamp
     2, [](int k, const UnaryArgs& a) { return k == 0 ? a.lo : a.hi; },
     [](int k, bool above, double x, const UnaryArgs& a) { return k == 0 ? (above ? x : a.lo) : (above ? a.hi : x); },
     true},
    {UnaryOp::kExp, "Exp", "exp(x)", 1, false, true, 4, 1,
     [](double x, const UnaryArgs&) { return std::exp(x); },
     [](double, double y, const UnaryArgs&) { return y; }, 0, nullptr, nullptr, false},
    {UnaryOp::kLog, "Log", "log(x)", 1, true, false, 4, 1,
     [](double x, const UnaryArgs&) { return std::log(x); },
     [](double x, double, const UnaryArgs&) { return 1 / x; }, 0, nullptr, nullptr, false},
    {UnaryOp::kSqrt, "Sqrt", "sqrt(x)", 1, false, true, 4, 2,
     [](double x, const UnaryArgs&) { return std::sqrt(x); },
     [](double, double y, const UnaryArgs&) { return 0.5 / y; }, 0, nullptr, nullptr, false},
    {UnaryOp::kErf, "Erf", "erf(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::erf(x); },
     [](double x, double, const UnaryArgs&) { return 2 / eltwise_detail::kSqrtPi * std::exp(-x * x); },
     0, nullptr, nullptr, false},
    {UnaryOp::kNeg, "Neg", "-x", 1, false, false, 1, 1,
     [](double x, const UnaryArgs&) { return -x; },
     [](double, double, const UnaryArgs&) { return -1.0; }, 0, nullptr, nullptr, false},
    {UnaryOp::kAbs, "Abs", "|x|", 1, true, false, 1, 1,
     [](double x, const UnaryArgs&) { return std::fabs(x); },
     [](double x, double, const UnaryArgs&) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; },  // torch.sgn(0) = 0
     1, [](int, const UnaryArgs&) { return 0.0; },
     [](int, bool above, double x, const UnaryArgs&) { return above ? x : -x; }, false},
    {UnaryOp::kReciprocal, "Reciprocal", "1 / x", 1, false, true, 1, 2,
     [](double x, const UnaryArgs&) { return 1 / x; },
     [](double, double y, const UnaryArgs&) { return -y * y; }, 0, nullptr, nullptr, false},
    {UnaryOp::kSoftplus, "Softplus", "log(1 + exp(x))", 1, true, false, 5, 4,
     [](double x, const UnaryArgs&) { return x > 20 ? x : std::log1p(std::exp(x)); },
     [](double x, double, const UnaryArgs&) { return eltwise_detail::sigmoid(x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kSoftsign, "Softsign", "x / (1 + |x|)", 1, true, false, 3, 3,
     [](double x, const UnaryArgs&) { return x / (1 + std::fabs(x)); },
     [](double x, double, const UnaryArgs&) { return 1 / ((1 + std::fabs(x)) * (1 + std::fabs(x))); },
     0, nullptr, nullptr, false},
    {UnaryOp::kElu, "Elu", "x if x > 0 else alpha * (exp(x) - 1)", 1, true, false, 4, 2,
     [](double x, const UnaryArgs& a) { return x > 0 ? x : a.alpha * std::expm1(x); },
     [](double x, double, const UnaryArgs& a) { return x > 0 ? 1.0 : a.alpha * std::exp(x); },
     1, [](int, const UnaryArgs&) { return 0.0; },
     [](int, bool above, double x, const UnaryArgs& a) { return above ? x : a.alpha * std::expm1(x); }, false},
    {UnaryOp::kSelu, "Selu", "gamma * (x if x > 0 else alpha * (exp(x) - 1))", 1, true, false, 5, 2,
     [](double x, const UnaryArgs& a) { return a.gamma * (x > 0 ? x : a.alpha * std::expm1(x)); },
     [](double x, double, const UnaryArgs& a) { return a.gamma * (x > 0 ? 1.0 : a.alpha * std::exp(x)); },
     1, [](int, const UnaryArgs&) { return 0.0; },
     [](int, bool above, double x, const UnaryArgs& a) { return a.gamma * (above ? x : a.alpha * std::expm1(x)); },
     false},
    {UnaryOp::kHardSigmoid, "HardSigmoid", "max(0, min(1, alpha * x + beta))", 1, true, false, 3, 1,
     [](double x, const UnaryArgs& a) { return eltwise_detail::hard_sigmoid(x, a); },
     [](double x, double, const UnaryArgs& a) {  // open interval, as torch's hardsigmoid_backward
       const double v = a.alpha * x + a.beta;
       return v > 0 && v < 1 ? a.alpha : 0.0;
     },
     2, [](int k, const UnaryArgs& a) { return ((k == 0 ? 0.0 : 1.0) - a.beta) / a.alpha; },
     [](int k, bool above, double x, const UnaryArgs& a) {
       return k == 0 ? (above ? a.alpha * x + a.beta : 0.0) : (above ? 1.0 : a.alpha * x + a.beta);
     },
     false},
    {UnaryOp::kHardSwish, "HardSwish", "x * max(0, min(1, x / 6 + 1 / 2))", 1, true, false, 5, 3,
     [](double x, const UnaryArgs&) { return x * std::fmax(0.0, std::fmin(1.0, x / 6 + 0.5)); },
     [](double x, double, const UnaryArgs&) { return x < -3 ? 0.0 : x <= 3 ? x / 3 + 0.5 : 1.0; },  // torch's
     2, [](int k, const UnaryArgs&) { return k == 0 ? -3.0 : 3.0; },
     [](int k, bool above, double x, const UnaryArgs&) {
       const double mid = x * (x / 6 + 0.5);
       return k == 0 ? (above ? mid : 0.0) : (above ? x : mid);
     },
     false},
    {UnaryOp::kGelu, "Gelu", "x * Phi(x) (approximate = \"tanh\": the tanh form)", 1, true, false, 8, 8,
     [](double x, const UnaryArgs& a) {
       return a.tanh ? 0.5 * x * (1 + std::tanh(eltwise_detail::gelu_inner(x)))
                     : 0.5 * x * (1 + std::erf(x / eltwise_detail::kSqrt2));
     },
     [](double x, double, const UnaryArgs& a) {
       if (a.tanh) {
         const double t = std::tanh(eltwise_detail::gelu_inner(x));
         return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * eltwise_detail::kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
       }
       return 0.5 * (1 + std::erf(x / eltwise_detail::kSqrt2)) +
              x * std::exp(-0.5 * x * x) / (eltwise_detail::kSqrt2 * eltwise_detail::kSqrtPi);
     },
     0, nullptr, nullptr, true},
    {UnaryOp::kSin, "Sin", "sin(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::sin(x); },
     [](double x, double, const UnaryArgs&) { return std::cos(x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kCos, "Cos", "cos(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::cos(x); },
     [](double x, double, const UnaryArgs&) { return -std::sin(x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kTan, "Tan", "tan(x)", 1, false, true, 4, 2,
     [](double x, const UnaryArgs&) { return std::tan(x); },
     [](double, double y, const UnaryArgs&) { return 1 + y * y; }, 0, nullptr, nullptr, false},
    {UnaryOp::kSinh, "Sinh", "sinh(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::sinh(x); },
     [](double x, double, const UnaryArgs&) { return std::cosh(x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kCosh, "Cosh", "cosh(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::cosh(x); },
     [](double x, double, const UnaryArgs&) { return std::sinh(x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kAsin, "Asin", "asin(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::asin(x); },
     [](double x, double, const UnaryArgs&) { return 1 / std::sqrt(1 - x * x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kAcos, "Acos", "acos(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::acos(x); },
     [](double x, double, const UnaryArgs&) { return -1 / std::sqrt(1 - x * x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kAtan, "Atan", "atan(x)", 1, true, false, 4, 3,
     [](double x, const UnaryArgs&) { return std::atan(x); },
     [](double x, double, const UnaryArgs&) { return 1 / (1 + x * x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kAsinh, "Asinh", "asinh(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::asinh(x); },
     [](double x, double, const UnaryArgs&) { return 1 / std::sqrt(x * x + 1); }, 0, nullptr, nullptr, false},
    {UnaryOp::kAcosh, "Acosh", "acosh(x)", 1, true, false, 4, 5,
     [](double x, const UnaryArgs&) { return std::acosh(x); },
     [](double x, double, const UnaryArgs&) { return 1 / std::sqrt(x * x - 1); }, 0, nullptr, nullptr, false},
    {UnaryOp::kAtanh, "Atanh", "atanh(x)", 1, true, false, 4, 3,
     [](double x, const UnaryArgs&) { return std::atanh(x); },
     [](double x, double, const UnaryArgs&) { return 1 / (1 - x * x); }, 0, nullptr, nullptr, false},
    {UnaryOp::kMish, "Mish", "x * tanh(log(1 + exp(x)))", 1, true, false, 10, 10,
     [](double x, const UnaryArgs&) { return x * std::tanh(std::log1p(std::exp(x))); },
     [](double x, double, const UnaryArgs&) {
       const double t = std::tanh(std::log1p(std::exp(x)));
       return t + x * eltwise_detail::sigmoid(x) * (1 - t * t);
     },
     0, nullptr, nullptr, false},
    {UnaryOp::kCelu, "Celu", "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))", 1, true, false, 5, 2,
     [](double x, const UnaryArgs& a) { return x > 0 ? x : a.alpha * std::expm1(x / a.alpha); },
     [](double x, double, const UnaryArgs& a) { return x > 0 ? 1.0 : std::exp(x / a.alpha); }, 0, nullptr, nullptr,
     false},
    // Opset 24's Swish; also SiLU (alpha = 1), which PyTorch exports as Sigmoid and Mul: the
    // fusion pass makes that one Swish node (core/fuse_gelu.cpp), so that a Conv or Gemm can
    // take it as its activation. (A plugin's com.example.mosaic.Swish is another op: ops are
    // keyed by domain, Node::op_key.)
    {UnaryOp::kSwish, "Swish", "x * sigmoid(alpha * x)", 1, true, false, 5, 6,
     [](double x, const UnaryArgs& a) { return x * eltwise_detail::sigmoid(a.alpha * x); },
     [](double x, double, const UnaryArgs& a) {
       const double s = eltwise_detail::sigmoid(a.alpha * x);
       return s + a.alpha * x * s * (1 - s);
     },
     0, nullptr, nullptr, true},
    // The function itself jumps at alpha (from 0 to alpha): the two pieces let gradcheck
    // take one-sided differences there. dy/dx is torch.threshold's, 1 strictly above alpha.
    {UnaryOp::kThresholdedRelu, "ThresholdedRelu", "x if x > alpha else 0", 1, true, false, 1, 1,
     [](double x, const UnaryArgs& a) { return x > a.alpha ? x : 0.0; },
     [](double x, double, const UnaryArgs& a) { return x > a.alpha ? 1.0 : 0.0; },
     1, [](int, const UnaryArgs& a) { return a.alpha; },
     [](int, bool above, double x, const UnaryArgs&) { return above ? x : 0.0; }, false},
}};
// clang-format on

// The rows follow the enum (checked at compile time; that every row is complete, its
// functions present and its kinks with their pieces, is checked by Tables.EveryRowIsComplete:
// sanitizer builds do not fold function-pointer comparisons into constants).
constexpr bool unary_rows_in_enum_order() {
  for (size_t i = 0; i < kUnaryOps.size(); ++i)
    if (kUnaryOps[i].op != static_cast<UnaryOp>(i)) return false;
  return true;
}
static_assert(unary_rows_in_enum_order(), "kUnaryOps: one row per UnaryOp, in enum order");

inline std::optional<UnaryOp> unary_op_of(std::string_view op_type) {
  for (const auto& u : kUnaryOps)
    if (op_type == u.name) return u.op;
  return std::nullopt;
}
inline const UnaryOpInfo& unary_info(UnaryOp op) { return kUnaryOps[static_cast<size_t>(op)]; }

/// The node's attributes with the op's ONNX defaults (LeakyRelu alpha 0.01, Elu 1, Selu's
/// alpha and gamma, HardSigmoid 0.2 and 0.5, Gelu's approximate) and Clip's bounds
/// (attributes before opset 11, constant inputs after; a bound computed at run time is
/// left infinite here and read by the kernel).
UnaryArgs unary_args(UnaryOp op, const OpContext& ctx);

/// y = op(x) in float, as the naive oracle computes it (in double, rounded once).
inline float unary_forward(UnaryOp op, float x, const UnaryArgs& a) {
  return static_cast<float>(unary_info(op).f(x, a));
}
/// dy/dx at x, y = op(x) (PyTorch's conventions at kinks).
inline float unary_derivative(UnaryOp op, float x, float y, const UnaryArgs& a) {
  return static_cast<float>(unary_info(op).df(x, y, a));
}

/// The unary rows ONNX also defines on integers and Mosaic computes on int64 (exactly, not
/// through a float): Abs, Neg and Relu. Forward only: an integer has no gradient.
inline bool unary_takes_int64(UnaryOp op) { return op == UnaryOp::kAbs || op == UnaryOp::kNeg || op == UnaryOp::kRelu; }
/// Those ops on int64; -INT64_MIN and |INT64_MIN| wrap to INT64_MIN, as numpy's int64 does.
inline int64_t unary_forward_i64(UnaryOp op, int64_t x) {
  const uint64_t neg = 0 - static_cast<uint64_t>(x);
  switch (op) {
    case UnaryOp::kAbs: return x < 0 ? static_cast<int64_t>(neg) : x;
    case UnaryOp::kNeg: return static_cast<int64_t>(neg);
    case UnaryOp::kRelu: return x > 0 ? x : 0;
    default: return 0;
  }
}

/// Two's complement wrap of an unsigned result: int64 Add, Sub and Mul wrap as ONNX's integer
/// tensors do (numpy's int64), with no signed overflow (undefined in C++).
constexpr int64_t wrap_i64(uint64_t v) {
  return v <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(v)
                                               : -static_cast<int64_t>(~v) - 1;
}

enum class BinaryOp {
  kAdd, kSub, kMul, kDiv, kPow,
  kCount  // not an op
};

struct BinaryOpInfo {
  BinaryOp op;
  const char* name;
  const char* summary;
  /// Add and Sub need neither operand in backward; the others both.
  bool backward_reads_inputs;
  double flops;                       ///< per output element
  double backward_flops_a, backward_flops_b;  ///< per output element, before broadcast sums
  double (*f)(double a, double b);
  /// The op on int64 (shape arithmetic, folded at load); nullptr: float only.
  int64_t (*fi)(int64_t a, int64_t b);
  /// d(a OP b)/da and /db times g, y = a OP b; PyTorch's rules.
  double (*da)(double g, double a, double b, double y);
  double (*db)(double g, double a, double b, double y);
};

// clang-format off
inline constexpr std::array<BinaryOpInfo, static_cast<size_t>(BinaryOp::kCount)> kBinaryOps = {{
    {BinaryOp::kAdd, "Add", "a + b", false, 1, 0, 0,
     [](double a, double b) { return a + b; }, [](int64_t a, int64_t b) { return wrap_i64(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); },
     [](double g, double, double, double) { return g; }, [](double g, double, double, double) { return g; }},
    {BinaryOp::kSub, "Sub", "a - b", false, 1, 0, 1,
     [](double a, double b) { return a - b; }, [](int64_t a, int64_t b) { return wrap_i64(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); },
     [](double g, double, double, double) { return g; }, [](double g, double, double, double) { return -g; }},
    {BinaryOp::kMul, "Mul", "a * b", true, 1, 1, 1,
     [](double a, double b) { return a * b; }, [](int64_t a, int64_t b) { return wrap_i64(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); },
     [](double g, double, double b, double) { return g * b; }, [](double g, double a, double, double) { return g * a; }},
    {BinaryOp::kDiv, "Div", "a / b", true, 1, 1, 3,
     [](double a, double b) { return a / b; },
     // Integer division truncates (C, numpy's np.trunc(a / b) for ONNX); by zero gives 0 and
     // INT64_MIN / -1 wraps, where C++ traps: neither is defined by ONNX.
     [](int64_t a, int64_t b) { return b == 0 ? int64_t{0} : b == -1 ? wrap_i64(0 - static_cast<uint64_t>(a)) : a / b; },
     [](double g, double, double b, double) { return g / b; },
     [](double g, double a, double b, double) { return -g * a / (b * b); }},
    {BinaryOp::kPow, "Pow", "a ^ b", true, 4, 4, 5,
     [](double a, double b) { return std::pow(a, b); }, nullptr,
     [](double g, double a, double b, double) { return b == 0 ? 0.0 : g * b * std::pow(a, b - 1); },
     // torch: 0 where a == 0 and b >= 0 (the limit), g * y * log(a) elsewhere
     [](double g, double a, double b, double y) { return a == 0 && b >= 0 ? 0.0 : g * y * std::log(a); }},
}};
// clang-format on

constexpr bool binary_rows_in_enum_order() {
  for (size_t i = 0; i < kBinaryOps.size(); ++i)
    if (kBinaryOps[i].op != static_cast<BinaryOp>(i)) return false;
  return true;
}
static_assert(binary_rows_in_enum_order(), "kBinaryOps: one row per BinaryOp, in enum order");

inline std::optional<BinaryOp> binary_op_of(std::string_view op_type) {
  for (const auto& b : kBinaryOps)
    if (op_type == b.name) return b.op;
  return std::nullopt;
}
inline const BinaryOpInfo& binary_info(BinaryOp op) { return kBinaryOps[static_cast<size_t>(op)]; }

/// a OP b in float (computed in double, rounded once), or in int64 where the row has it.
inline float binary_forward(BinaryOp op, float a, float b) { return static_cast<float>(binary_info(op).f(a, b)); }
inline double binary_forward(BinaryOp op, double a, double b) { return binary_info(op).f(a, b); }
inline int64_t binary_forward(BinaryOp op, int64_t a, int64_t b) {
  const auto fi = binary_info(op).fi;
  return fi ? fi(a, b) : 0;
}
inline float binary_grad_a(BinaryOp op, float g, float a, float b) {
  return static_cast<float>(binary_info(op).da(g, a, b, binary_info(op).f(a, b)));
}
inline float binary_grad_b(BinaryOp op, float g, float a, float b) {
  return static_cast<float>(binary_info(op).db(g, a, b, binary_info(op).f(a, b)));
}

/// The comparisons and logical ops: two operands (numpy broadcasting) to a bool tensor; no
/// gradient (their outputs are masks). Comparisons take float32 or int64 operands of one
/// dtype, the logical ops bool ones.
enum class CompareOp {
  kEqual, kLess, kLessOrEqual, kGreater, kGreaterOrEqual, kAnd, kOr, kXor,
  kCount  // not an op
};

struct CompareOpInfo {
  CompareOp op;
  const char* name;
  const char* summary;
  bool logical;  ///< And, Or, Xor: bool operands
  bool (*f)(double a, double b);
  /// The same on int64 operands, exactly (a double holds integers exactly only up to 2^53).
  bool (*fi)(int64_t a, int64_t b);
};

// clang-format off
inline constexpr std::array<CompareOpInfo, static_cast<size_t>(CompareOp::kCount)> kCompareOps = {{
    {CompareOp::kEqual, "Equal", "a == b", false, [](double a, double b) { return a == b; },
     [](int64_t a, int64_t b) { return a == b; }},
    {CompareOp::kLess, "Less", "a < b", false, [](double a, double b) { return a < b; },
     [](int64_t a, int64_t b) { return a < b; }},
    {CompareOp::kLessOrEqual, "LessOrEqual", "a <= b", false, [](double a, double b) { return a <= b; },
     [](int64_t a, int64_t b) { return a <= b; }},
    {CompareOp::kGreater, "Greater", "a > b", false, [](double a, double b) { return a > b; },
     [](int64_t a, int64_t b) { return a > b; }},
    {CompareOp::kGreaterOrEqual, "GreaterOrEqual", "a >= b", false, [](double a, double b) { return a >= b; },
     [](int64_t a, int64_t b) { return a >= b; }},
    {CompareOp::kAnd, "And", "a and b", true, [](double a, double b) { return a != 0 && b != 0; },
     [](int64_t a, int64_t b) { return a != 0 && b != 0; }},
    {CompareOp::kOr, "Or", "a or b", true, [](double a, double b) { return a != 0 || b != 0; },
     [](int64_t a, int64_t b) { return a != 0 || b != 0; }},
    {CompareOp::kXor, "Xor", "a xor b", true, [](double a, double b) { return (a != 0) != (b != 0); },
     [](int64_t a, int64_t b) { return (a != 0) != (b != 0); }},
}};
// clang-format on

constexpr bool compare_rows_in_enum_order() {
  for (size_t i = 0; i < kCompareOps.size(); ++i)
    if (kCompareOps[i].op != static_cast<CompareOp>(i)) return false;
  return true;
}
static_assert(compare_rows_in_enum_order(), "kCompareOps: one row per CompareOp, in enum order");

inline std::optional<CompareOp> compare_op_of(std::string_view op_type) {
  for (const auto& c : kCompareOps)
    if (op_type == c.name) return c.op;
  return std::nullopt;
}
inline const CompareOpInfo& compare_info(CompareOp op) { return kCompareOps[static_cast<size_t>(op)]; }

}  // namespace mosaic
