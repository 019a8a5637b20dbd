// The element-wise ops every backend implements, in one table: which ops they are, their
// scalar forward and derivative (the reference rules, with PyTorch's conventions at kinks),
// and what their backward reads of the forward tensors. Backends register the ops from the
// tables and switch over the enums (no `default:`), so an op added here is a compile warning
// (-Wswitch) in every backend that does not handle it, never a silent fall-through.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string_view>
#include <type_traits>

namespace mosaic {

enum class UnaryOp { kRelu, kLeakyRelu, kSigmoid, kTanh, kClip };

struct UnaryOpInfo {
  UnaryOp op;
  const char* name;  // the ONNX op type
  /// What the backward rule reads: Relu, Sigmoid and Tanh differentiate from their output
  /// (y > 0, y (1 - y), 1 - y^2), LeakyRelu and Clip from their input.
  bool backward_reads_input, backward_reads_output;
};

inline constexpr std::array<UnaryOpInfo, 5> kUnaryOps = {{
    {UnaryOp::kRelu, "Relu", false, true},
    {UnaryOp::kLeakyRelu, "LeakyRelu", true, false},
    {UnaryOp::kSigmoid, "Sigmoid", false, true},
    {UnaryOp::kTanh, "Tanh", false, true},
    {UnaryOp::kClip, "Clip", true, false},
}};

inline std::optional<UnaryOp> unary_op_of(std::string_view op_type) {
  for (const auto& u : kUnaryOps)
    if (op_type == u.name) return u.op;
  return std::nullopt;
}
inline const UnaryOpInfo& unary_info(UnaryOp op) { return kUnaryOps[static_cast<size_t>(op)]; }

/// The attributes a unary op reads: LeakyRelu's alpha, Clip's bounds.
struct UnaryArgs {
  float alpha = 0.01f;
  float lo = -INFINITY, hi = INFINITY;
};

/// y = op(x), as the naive oracle computes it.
inline float unary_forward(UnaryOp op, float x, const UnaryArgs& a) {
  switch (op) {
    case UnaryOp::kRelu: return x > 0.f ? x : 0.f;
    case UnaryOp::kLeakyRelu: return x >= 0.f ? x : a.alpha * x;
    case UnaryOp::kSigmoid: return 1.f / (1.f + std::exp(-x));
    case UnaryOp::kTanh: return std::tanh(x);
    case UnaryOp::kClip: return std::min(std::max(x, a.lo), a.hi);
  }
  return x;
}

/// dy/dx at x (y = op(x)). PyTorch's conventions at kinks: Relu and LeakyRelu use x > 0 (for
/// Relu read as y > 0, the same set, so x need not be kept), Clip passes x in [lo, hi].
inline float unary_derivative(UnaryOp op, float x, float y, const UnaryArgs& a) {
  switch (op) {
    case UnaryOp::kRelu: return y > 0.f ? 1.f : 0.f;
    case UnaryOp::kLeakyRelu: return x > 0.f ? 1.f : a.alpha;
    case UnaryOp::kSigmoid: return y * (1.f - y);
    case UnaryOp::kTanh: return 1.f - y * y;
    case UnaryOp::kClip: return (x >= a.lo && x <= a.hi) ? 1.f : 0.f;
  }
  return 0.f;
}

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

struct BinaryOpInfo {
  BinaryOp op;
  const char* name;
  /// Add and Sub need neither operand in backward, Mul and Div both.
  bool backward_reads_inputs;
};

inline constexpr std::array<BinaryOpInfo, 4> kBinaryOps = {{
    {BinaryOp::kAdd, "Add", false},
    {BinaryOp::kSub, "Sub", false},
    {BinaryOp::kMul, "Mul", true},
    {BinaryOp::kDiv, "Div", true},
}};

inline std::optional<BinaryOp> binary_op_of(std::string_view op_type) {
  for (const auto& b : kBinaryOps)
    if (op_type == b.name) return b.op;
  return std::nullopt;
}
inline const BinaryOpInfo& binary_info(BinaryOp op) { return kBinaryOps[static_cast<size_t>(op)]; }

/// a OP b (float, or int64 for shape arithmetic).
template <class T>
T binary_forward(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::kAdd: return a + b;
    case BinaryOp::kSub: return a - b;
    case BinaryOp::kMul: return a * b;
    case BinaryOp::kDiv:
      if constexpr (std::is_integral_v<T>)
        if (b == T(0)) return T(0);  // int64 shape arithmetic: no trap
      return a / b;
  }
  return a;
}

/// d(a OP b)/da and d(a OP b)/db times g.
inline float binary_grad_a(BinaryOp op, float g, float, float b) {
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub: return g;
    case BinaryOp::kMul: return g * b;
    case BinaryOp::kDiv: return g / b;
  }
  return 0.f;
}
inline float binary_grad_b(BinaryOp op, float g, float a, float b) {
  switch (op) {
    case BinaryOp::kAdd: return g;
    case BinaryOp::kSub: return -g;
    case BinaryOp::kMul: return g * a;
    case BinaryOp::kDiv: return -g * a / (b * b);
  }
  return 0.f;
}

}  // namespace mosaic
