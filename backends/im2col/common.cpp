// What the im2col backend's kernel families share (im2col_internal.hpp).
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {

float ordered_sum(const float* p, int64_t n) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) lane[l] += p[i + l];
  for (int l = 0; i < n; ++i, ++l) lane[l] += p[i];
  float s = 0.f;
  for (float v : lane) s += v;
  return s;
}

void unary_forward_block(UnaryOp op, const UnaryArgs& a, const float* xp, float* yp, int64_t n) {
  ConstArrayMap x(xp, n);
  ArrayMap y(yp, n);
  const float alpha = static_cast<float>(a.alpha), lo = static_cast<float>(a.lo), hi = static_cast<float>(a.hi);
  switch (op) {  // the row's rules (operators/eltwise.hpp), vectorised
    case UnaryOp::kRelu: y = x.max(0.f); return;
    case UnaryOp::kLeakyRelu: y = (x >= 0.f).select(x, alpha * x); return;
    case UnaryOp::kSigmoid: y = 1.f / (1.f + (-x).exp()); return;
    case UnaryOp::kTanh: y = x.tanh(); return;
    case UnaryOp::kClip: y = x.max(lo).min(hi); return;
    case UnaryOp::kExp: y = x.exp(); return;
    case UnaryOp::kLog: y = x.log(); return;
    case UnaryOp::kSqrt: y = x.sqrt(); return;
    case UnaryOp::kNeg: y = -x; return;
    case UnaryOp::kAbs: y = x.abs(); return;
    case UnaryOp::kReciprocal: y = x.inverse(); return;
    case UnaryOp::kGelu:
      if (a.tanh) {  // GPT-2's form, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        const auto c = static_cast<float>(eltwise_detail::kSqrt2OverPi);
        y = 0.5f * x * (1.f + (c * (x + 0.044715f * x.cube())).tanh());
        return;
      }
      break;
    default: break;
  }
  // The others (and Gelu's erf form): the row's scalar rule.
  for (int64_t i = 0; i < n; ++i) yp[i] = unary_forward(op, xp[i], a);
}

void unary_backward_block(UnaryOp op, const UnaryArgs& a, const float* xp, const float* yp, const float* dyp,
                          float* dxp, int64_t n) {
  // x or y may be null where the row says backward does not read it; only the cases that
  // read one are vectorised with it.
  ConstArrayMap dy(dyp, n);
  ArrayMap dx(dxp, n);
  const float alpha = static_cast<float>(a.alpha), lo = static_cast<float>(a.lo), hi = static_cast<float>(a.hi);
  switch (op) {
    case UnaryOp::kRelu: dx = (ConstArrayMap(yp, n) > 0.f).select(dy, 0.f); return;  // y > 0 exactly where x > 0
    case UnaryOp::kLeakyRelu: dx = (ConstArrayMap(xp, n) > 0.f).select(dy, alpha * dy); return;
    case UnaryOp::kSigmoid: {
      ConstArrayMap y(yp, n);
      dx = dy * y * (1.f - y);
      return;
    }
    case UnaryOp::kTanh: dx = dy * (1.f - ConstArrayMap(yp, n).square()); return;
    case UnaryOp::kClip: {
      ConstArrayMap x(xp, n);
      dx = (x >= lo && x <= hi).select(dy, 0.f);
      return;
    }
    case UnaryOp::kExp: dx = dy * ConstArrayMap(yp, n); return;
    case UnaryOp::kLog: dx = dy / ConstArrayMap(xp, n); return;
    case UnaryOp::kSqrt: dx = 0.5f * dy / ConstArrayMap(yp, n); return;
    case UnaryOp::kNeg: dx = -dy; return;
    case UnaryOp::kReciprocal: dx = -dy * ConstArrayMap(yp, n).square(); return;
    default: {
      const UnaryOpInfo& u = unary_info(op);
      for (int64_t i = 0; i < n; ++i)
        dxp[i] = dyp[i] * static_cast<float>(u.df(xp ? xp[i] : 0.0, yp ? yp[i] : 0.0, a));
    }
  }
}

void apply_activation(const Activation& act, float* y, int64_t n) {
  if (act.active()) unary_forward_block(*act.op, act.args, y, y, n);
}

Expected<Win2> lift2(const Window& w, const Node& node) {
  if (w.rank() == 2)
    return Win2{w.in[0], w.in[1], w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.stride[0], w.stride[1],
                w.dilation[0], w.dilation[1], w.pad_begin[0], w.pad_begin[1], w.pad_end[0], w.pad_end[1]};
  if (w.rank() == 1)
    return Win2{1, w.in[0], 1, w.out[0], 1, w.kernel[0], 1, w.stride[0], 1, w.dilation[0], 0, w.pad_begin[0], 0,
                w.pad_end[0]};
  return Status::unsupported(node.label() + ": im2col implements 1-d and 2-d windows only, got " +
                             std::to_string(w.rank()) + "-d");
}

}  // namespace mosaic::im2col_impl
