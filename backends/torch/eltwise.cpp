// torch: the element-wise ops of operators/eltwise.hpp and broadcasting binary ops, each with
// the ATen function PyTorch's eager mode calls and the backward function its autograd uses
// (threshold_backward, leaky_relu_backward, gelu_backward, ...; a few composites where
// autograd composes too), and Softmax/LogSoftmax.
#include <cmath>
#include <stdexcept>
#include <string>

#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {

std::optional<TorchUnary> torch_unary(UnaryOp op) {
  using X = const at::Tensor&;
  using A = const UnaryArgs&;
  switch (op) {
    case UnaryOp::kRelu:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::clamp_min_out(y, x, 0); },  // at::relu's own kernel
                        [](X, X y, X dy, at::Tensor& dx, A) { at::threshold_backward_out(dx, dy, y, 0); }};
    case UnaryOp::kLeakyRelu:
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::leaky_relu_out(y, x, a.alpha); },
                        [](X x, X, X dy, at::Tensor& dx, A a) { at::leaky_relu_backward_out(dx, dy, x, a.alpha, false); }};
    case UnaryOp::kSigmoid:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::sigmoid_out(y, x); },
                        [](X, X y, X dy, at::Tensor& dx, A) { at::sigmoid_backward_out(dx, dy, y); }};
    case UnaryOp::kTanh:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::tanh_out(y, x); },
                        [](X, X y, X dy, at::Tensor& dx, A) { at::tanh_backward_out(dx, dy, y); }};
    case UnaryOp::kClip:
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::clamp_out(y, x, a.lo, a.hi); },
                        [](X x, X, X dy, at::Tensor& dx, A a) { at::hardtanh_backward_out(dx, dy, x, a.lo, a.hi); }};
    case UnaryOp::kExp:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::exp_out(y, x); },
                        [](X, X y, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, y); }};
    case UnaryOp::kLog:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::log_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, x); }};
    case UnaryOp::kSqrt:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::sqrt_out(y, x); },
                        [](X, X y, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, 2 * y); }};
    case UnaryOp::kErf:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::erf_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, (2 / std::sqrt(M_PI)) * (-x * x).exp()); }};
    case UnaryOp::kNeg:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::neg_out(y, x); },
                        [](X, X, X dy, at::Tensor& dx, A) { at::neg_out(dx, dy); }};
    case UnaryOp::kAbs:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::abs_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, x.sgn()); }};
    case UnaryOp::kReciprocal:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::reciprocal_out(y, x); },
                        [](X, X y, X dy, at::Tensor& dx, A) { at::mul_out(dx, -dy, y * y); }};
    case UnaryOp::kSoftplus:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::softplus_out(y, x, 1, 20); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::softplus_backward_out(dx, dy, x, 1, 20); }};
    case UnaryOp::kSoftsign:  // torch.nn.functional.softsign is this composite
      return TorchUnary{[](X x, at::Tensor& y, A) { at::div_out(y, x, 1 + x.abs()); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, (1 + x.abs()).square()); }};
    case UnaryOp::kElu:
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::elu_out(y, x, a.alpha, 1, 1); },
                        [](X x, X, X dy, at::Tensor& dx, A a) { at::elu_backward_out(dx, dy, a.alpha, 1, 1, false, x); }};
    case UnaryOp::kSelu:
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::elu_out(y, x, a.alpha, a.gamma, 1); },
                        [](X x, X, X dy, at::Tensor& dx, A a) { at::elu_backward_out(dx, dy, a.alpha, a.gamma, 1, false, x); }};
    case UnaryOp::kHardSigmoid:  // ATen's hardsigmoid fixes alpha = 1/6; ONNX's default is 0.2
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::clamp_out(y, x * a.alpha + a.beta, 0, 1); },
                        [](X x, X, X dy, at::Tensor& dx, A a) {
                          const at::Tensor v = x * a.alpha + a.beta;
                          at::mul_out(dx, dy, ((v > 0) & (v < 1)).to(at::kFloat) * a.alpha);
                        }};
    case UnaryOp::kHardSwish:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::hardswish_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { dx.copy_(at::hardswish_backward(dy, x)); }};
    case UnaryOp::kGelu:
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::gelu_out(y, x, a.tanh ? "tanh" : "none"); },
                        [](X x, X, X dy, at::Tensor& dx, A a) { at::gelu_backward_out(dx, dy, x, a.tanh ? "tanh" : "none"); }};
    case UnaryOp::kThresholdedRelu:  // torch.threshold(x, alpha, 0) and its backward
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::threshold_out(y, x, a.alpha, 0); },
                        [](X x, X, X dy, at::Tensor& dx, A a) { at::threshold_backward_out(dx, dy, x, a.alpha); }};
    case UnaryOp::kSin:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::sin_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, x.cos()); }};
    case UnaryOp::kCos:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::cos_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, -x.sin()); }};
    case UnaryOp::kTan:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::tan_out(y, x); },
                        [](X, X y, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, 1 + y * y); }};
    case UnaryOp::kSinh:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::sinh_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, x.cosh()); }};
    case UnaryOp::kCosh:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::cosh_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::mul_out(dx, dy, x.sinh()); }};
    case UnaryOp::kAsin:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::asin_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, (1 - x * x).sqrt()); }};
    case UnaryOp::kAcos:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::acos_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, -dy, (1 - x * x).sqrt()); }};
    case UnaryOp::kAtan:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::atan_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, 1 + x * x); }};
    case UnaryOp::kAsinh:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::asinh_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, (x * x + 1).sqrt()); }};
    case UnaryOp::kAcosh:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::acosh_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, (x * x - 1).sqrt()); }};
    case UnaryOp::kAtanh:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::atanh_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { at::div_out(dx, dy, 1 - x * x); }};
    case UnaryOp::kMish:
      return TorchUnary{[](X x, at::Tensor& y, A) { at::mish_out(y, x); },
                        [](X x, X, X dy, at::Tensor& dx, A) { dx.copy_(at::mish_backward(dy, x)); }};
    case UnaryOp::kCelu:  // ATen's celu has no out form; autograd differentiates it as elu
      return TorchUnary{[](X x, at::Tensor& y, A a) { y.copy_(at::celu(x, a.alpha)); },
                        [](X x, X, X dy, at::Tensor& dx, A a) {
                          at::elu_backward_out(dx, dy, a.alpha, 1, 1 / a.alpha, false, x);
                        }};
    case UnaryOp::kSwish:  // x * sigmoid(alpha x); ATen's silu is alpha = 1 only
      return TorchUnary{[](X x, at::Tensor& y, A a) { at::mul_out(y, x, at::sigmoid(x * a.alpha)); },
                        [](X x, X, X dy, at::Tensor& dx, A a) {
                          const at::Tensor s = at::sigmoid(x * a.alpha);
                          at::mul_out(dx, dy, s * (1 + a.alpha * x * (1 - s)));
                        }};
    default: return std::nullopt;  // no ATen mapping yet: declined, the planner places it elsewhere
  }
}

namespace {

/// Whether ATen computes binary row `op` here: BinaryKernel's cases.
bool torch_binary(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
    case BinaryOp::kSub:
    case BinaryOp::kMul:
    case BinaryOp::kDiv:
    case BinaryOp::kPow: return true;
    default: return false;  // no ATen mapping: not registered, the planner places it elsewhere
  }
}

class UnaryKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const auto op = unary_op_of(ctx.node->op_type);
    if (!op) return Status::unsupported(label_ + ": not an element-wise op of the torch backend");
    op_ = *op;
    const auto fns = torch_unary(op_);
    if (!fns) return Status::unsupported(label_ + ": the torch backend has no ATen function for " + ctx.node->op_type);
    fns_ = *fns;
    for (size_t i = 1; i < 3; ++i)
      if (ctx.has_input(i) && !ctx.constant(i))
        return Status::unsupported(label_ + ": the torch backend needs Clip's bounds to be constants");
    args_ = unary_args(op_, ctx);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i == 0 && unary_info(op_).backward_reads_input; }
  bool backward_reads_output(size_t) const override { return unary_info(op_).backward_reads_output; }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor y = view(dst[0]);
    fns_.forward(view(src[0]), y, args_);
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    at::Tensor dx = view(a.diff_src[0]);
    const UnaryOpInfo& u = unary_info(op_);
    fns_.backward(u.backward_reads_input ? view(a.src[0]) : at::Tensor(),
                  u.backward_reads_output ? view(a.dst[0]) : at::Tensor(), view(a.diff_dst[0]), dx, args_);
  }

  UnaryOp op_ = UnaryOp::kRelu;
  TorchUnary fns_{};
  UnaryArgs args_;
};

class BinaryKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const auto op = binary_op_of(ctx.node->op_type);
    if (!op) return Status::unsupported(label_ + ": not a binary op of the torch backend");
    op_ = *op;
    if (!torch_binary(op_)) return Status::unsupported(label_ + ": the torch backend has no ATen function for " + ctx.node->op_type);
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return binary_info(op_).backward_reads_inputs; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor y = view(dst[0]);
    const at::Tensor a = view(src[0]), b = view(src[1]);
    switch (op_) {
      case BinaryOp::kAdd: at::add_out(y, a, b); return;
      case BinaryOp::kSub: at::sub_out(y, a, b); return;
      case BinaryOp::kMul: at::mul_out(y, a, b); return;
      case BinaryOp::kDiv: at::div_out(y, a, b); return;
      case BinaryOp::kPow: at::pow_out(y, a, b); return;
      default: throw std::logic_error("no ATen function for " + std::string(binary_info(op_).name));  // declined in init
    }
  }
  // The gradient of each operand, summed over the axes it was broadcast along.
  void run_backward(const BackwardArgs& g) override {
    const at::Tensor dy = view(g.diff_dst[0]);
    Tensor* da = g.diff_src[0];
    Tensor* db = g.diff_src.size() > 1 ? g.diff_src[1] : nullptr;
    const bool reads = binary_info(op_).backward_reads_inputs;
    const at::Tensor a = reads ? view(g.src[0]) : at::Tensor(), b = reads ? view(g.src[1]) : at::Tensor();
    switch (op_) {
      case BinaryOp::kAdd:
      case BinaryOp::kSub:
        if (da) write(reduce_to(dy, a_shape_), da);
        if (db) write(reduce_to(op_ == BinaryOp::kAdd ? dy : dy.neg(), b_shape_), db);
        return;
      case BinaryOp::kMul:
        if (da) write(reduce_to(dy * b, a_shape_), da);
        if (db) write(reduce_to(dy * a, b_shape_), db);
        return;
      case BinaryOp::kDiv:
        if (da) write(reduce_to(dy / b, a_shape_), da);
        if (db) write(reduce_to(-dy * a / (b * b), b_shape_), db);
        return;
      case BinaryOp::kPow:  // autograd's pow_backward_self and pow_backward_exponent
        if (da) write(reduce_to(at::where(b == 0, at::zeros_like(dy), dy * b * a.pow(b - 1)), a_shape_), da);
        if (db) write(reduce_to(at::where((a == 0) & (b >= 0), at::zeros_like(dy), dy * a.pow(b) * a.log()), b_shape_), db);
        return;
      default: throw std::logic_error("no ATen gradient for " + std::string(binary_info(op_).name));  // declined in init
    }
  }

  BinaryOp op_ = BinaryOp::kAdd;
  Shape a_shape_, b_shape_;
};

class SoftmaxKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const SoftmaxParams p, softmax_params(ctx));
    shape_ = {p.outer, p.axis_dim, p.inner};  // softmax over axis 1 of this view
    log_ = ctx.node->op_type == "LogSoftmax";
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }

 private:
  at::Tensor as3(const Tensor* t) const { return view(t).view(at::IntArrayRef(shape_)); }
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor y = as3(dst[0]);
    if (log_) at::_log_softmax_out(y, as3(src[0]), 1, false);
    else at::_softmax_out(y, as3(src[0]), 1, false);
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    at::Tensor dx = as3(a.diff_src[0]);
    if (log_) at::_log_softmax_backward_data_out(dx, as3(a.diff_dst[0]), as3(a.dst[0]), 1, at::kFloat);
    else at::_softmax_backward_data_out(dx, as3(a.diff_dst[0]), as3(a.dst[0]), 1, at::kFloat);
  }
  Shape shape_;
  bool log_ = false;
};

}  // namespace

void add_eltwise_kernels(BackendRegistration& r) {
  // The rows of operators/eltwise.hpp that ATen computes here, and only those: any other row
  // has no torch kernel, and the registry says so.
  for (const auto& u : kUnaryOps)
    if (torch_unary(u.op)) r.kernel(u.name, make_factory<UnaryKernel>());
  for (const auto& b : kBinaryOps)
    if (torch_binary(b.op)) r.kernel(b.name, make_factory<BinaryKernel>());
  for (const char* op : {"Softmax", "LogSoftmax"}) r.kernel(op, make_factory<SoftmaxKernel>());
}

}  // namespace mosaic::torch_backend
