// The attributes of the element-wise ops (operators/eltwise.hpp), with ONNX's defaults.
#include "operators/eltwise.hpp"

#include "operators/params.hpp"

namespace mosaic {

UnaryArgs unary_args(UnaryOp op, const OpContext& ctx) {
  const Node& n = *ctx.node;
  UnaryArgs a;
  switch (op) {
    case UnaryOp::kLeakyRelu: a.alpha = n.attr_float("alpha", 0.01f); break;
    case UnaryOp::kElu:
    case UnaryOp::kCelu:
    case UnaryOp::kSwish:
    case UnaryOp::kThresholdedRelu: a.alpha = n.attr_float("alpha", 1.0f); break;
    case UnaryOp::kSelu:
      a.alpha = n.attr_float("alpha", 1.67326319217681884765625f);
      a.gamma = n.attr_float("gamma", 1.05070102214813232421875f);
      break;
    case UnaryOp::kHardSigmoid:
      a.alpha = n.attr_float("alpha", 0.2f);
      a.beta = n.attr_float("beta", 0.5f);
      break;
    case UnaryOp::kGelu: a.tanh = n.attr_string("approximate", "none") == "tanh"; break;
    case UnaryOp::kClip: {
      const ClipParams c = clip_attr_params(ctx);
      a.lo = c.lo;
      a.hi = c.hi;
      break;
    }
    default: break;  // the op reads no attribute
  }
  return a;
}

}  // namespace mosaic
