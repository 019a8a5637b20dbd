// The host side of the cuda backend's element-wise ops, free of CUDA headers (so that
// tests/test_cuda_math.cpp checks it on any machine): which rows of operators/eltwise.hpp the
// device computes, with their arguments in float, and the broadcast geometry of its binary
// ops.
#pragma once

#include <optional>

#include "backends/cuda/device_math.hpp"
#include "ir/tensor.hpp"
#include "operators/eltwise.hpp"

namespace mosaic::cuda_backend {

/// The device form of element-wise op `op` with its arguments; nullopt where it has none.
inline std::optional<DevUnaryArgs> device_unary(UnaryOp op, const UnaryArgs& a) {
  DevUnaryArgs d;
  d.alpha = static_cast<float>(a.alpha);
  d.beta = static_cast<float>(a.beta);
  d.gamma = static_cast<float>(a.gamma);
  d.lo = static_cast<float>(a.lo);
  d.hi = static_cast<float>(a.hi);
  switch (op) {
    case UnaryOp::kRelu: d.op = DevUnary::kRelu; break;
    case UnaryOp::kLeakyRelu: d.op = DevUnary::kLeakyRelu; break;
    case UnaryOp::kSigmoid: d.op = DevUnary::kSigmoid; break;
    case UnaryOp::kTanh: d.op = DevUnary::kTanh; break;
    case UnaryOp::kClip: d.op = DevUnary::kClip; break;
    case UnaryOp::kExp: d.op = DevUnary::kExp; break;
    case UnaryOp::kLog: d.op = DevUnary::kLog; break;
    case UnaryOp::kSqrt: d.op = DevUnary::kSqrt; break;
    case UnaryOp::kErf: d.op = DevUnary::kErf; break;
    case UnaryOp::kNeg: d.op = DevUnary::kNeg; break;
    case UnaryOp::kAbs: d.op = DevUnary::kAbs; break;
    case UnaryOp::kReciprocal: d.op = DevUnary::kReciprocal; break;
    case UnaryOp::kSoftplus: d.op = DevUnary::kSoftplus; break;
    case UnaryOp::kSoftsign: d.op = DevUnary::kSoftsign; break;
    case UnaryOp::kElu: d.op = DevUnary::kElu; break;
    case UnaryOp::kSelu: d.op = DevUnary::kSelu; break;
    case UnaryOp::kHardSigmoid: d.op = DevUnary::kHardSigmoid; break;
    case UnaryOp::kHardSwish: d.op = DevUnary::kHardSwish; break;
    case UnaryOp::kGelu: d.op = a.tanh ? DevUnary::kGeluTanh : DevUnary::kGelu; break;
    case UnaryOp::kSin: d.op = DevUnary::kSin; break;
    case UnaryOp::kCos: d.op = DevUnary::kCos; break;
    default: return std::nullopt;
  }
  return d;
}

/// The device form of binary row `op` (dev_combine, dev_binary_grad); nullopt where it has
/// none, so that the backend registers only the rows it computes.
inline std::optional<DevBinary> device_binary(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return DevBinary::kAdd;
    case BinaryOp::kSub: return DevBinary::kSub;
    case BinaryOp::kMul: return DevBinary::kMul;
    case BinaryOp::kDiv: return DevBinary::kDiv;
    default: return std::nullopt;
  }
}

/// a OP b's shapes for the device (at most 6 output dimensions: the caller checks): each
/// operand's strides right-aligned over the output's dimensions (0 where it is broadcast);
/// then dimensions of extent 1 dropped and each merged into the one outside it where both
/// operands step over the pair as over one dimension: operands of the output's shape become
/// one contiguous run (the kernel's vectorised path), a broadcast keeps only the dimensions
/// its indexing needs.
inline Broadcast make_broadcast(const Shape& a, const Shape& b, const Shape& out) {
  Broadcast full;
  full.rank = static_cast<int>(out.size());
  for (size_t d = 0; d < out.size(); ++d) full.dims[d] = out[d];
  auto strides = [&](const Shape& in, int64_t* s) {
    int64_t step = 1;
    for (int d = full.rank - 1, i = static_cast<int>(in.size()) - 1; d >= 0; --d, --i) {
      const int64_t dim = i >= 0 ? in[static_cast<size_t>(i)] : 1;
      s[d] = dim == 1 ? 0 : step;
      step *= dim;
    }
  };
  strides(a, full.a_strides);
  strides(b, full.b_strides);
  Broadcast c;
  for (int d = 0; d < full.rank; ++d) {
    const int64_t n = full.dims[d], sa = full.a_strides[d], sb = full.b_strides[d];
    if (n == 1) continue;
    if (c.rank > 0 && c.a_strides[c.rank - 1] == sa * n && c.b_strides[c.rank - 1] == sb * n) {
      c.dims[c.rank - 1] *= n;
      c.a_strides[c.rank - 1] = sa;
      c.b_strides[c.rank - 1] = sb;
    } else {
      c.dims[c.rank] = n;
      c.a_strides[c.rank] = sa;
      c.b_strides[c.rank] = sb;
      ++c.rank;
    }
  }
  return c;
}

}  // namespace mosaic::cuda_backend
