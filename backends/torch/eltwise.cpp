// torch: element-wise activations (Relu, LeakyRelu, Sigmoid, Tanh, Clip), broadcasting
// binary ops (Add, Sub, Mul, Div) and Softmax/LogSoftmax, each with the backward function
// PyTorch's autograd uses for it (threshold_backward, leaky_relu_backward, ...).
#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {
namespace {

class UnaryKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const std::string& op = ctx.node->op_type;
    if (op == "Relu") {
      op_ = Op::kRelu;
    } else if (op == "LeakyRelu") {
      op_ = Op::kLeakyRelu;
      alpha_ = ctx.node->attr_float("alpha", 0.01f);
    } else if (op == "Sigmoid") {
      op_ = Op::kSigmoid;
    } else if (op == "Tanh") {
      op_ = Op::kTanh;
    } else if (op == "Clip") {
      op_ = Op::kClip;
      for (size_t i = 1; i < 3; ++i)
        if (ctx.has_input(i) && !ctx.constant(i))
          return Status::unsupported(label_ + ": the torch backend needs Clip's bounds to be constants");
      const ClipParams p = clip_attr_params(ctx);
      lo_ = p.lo;
      hi_ = p.hi;
    } else {
      return Status::unsupported(label_ + ": not an element-wise op of the torch backend");
    }
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  /// Relu, Sigmoid and Tanh differentiate from their output, LeakyRelu and Clip from x.
  bool backward_reads_input(size_t i) const override { return i == 0 && (op_ == Op::kLeakyRelu || op_ == Op::kClip); }
  bool backward_reads_output(size_t) const override { return !backward_reads_input(0); }

 private:
  enum class Op { kRelu, kLeakyRelu, kSigmoid, kTanh, kClip };

  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const at::Tensor x = view(src[0]);
    at::Tensor y = view(dst[0]);
    switch (op_) {
      case Op::kRelu: at::clamp_min_out(y, x, 0); return;  // at::relu's own kernel
      case Op::kLeakyRelu: at::leaky_relu_out(y, x, alpha_); return;
      case Op::kSigmoid: at::sigmoid_out(y, x); return;
      case Op::kTanh: at::tanh_out(y, x); return;
      case Op::kClip: at::clamp_out(y, x, lo_, hi_); return;
    }
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    const at::Tensor dy = view(a.diff_dst[0]);
    at::Tensor dx = view(a.diff_src[0]);
    switch (op_) {
      case Op::kRelu: at::threshold_backward_out(dx, dy, view(a.dst[0]), 0); return;
      case Op::kLeakyRelu: at::leaky_relu_backward_out(dx, dy, view(a.src[0]), alpha_, false); return;
      case Op::kSigmoid: at::sigmoid_backward_out(dx, dy, view(a.dst[0])); return;
      case Op::kTanh: at::tanh_backward_out(dx, dy, view(a.dst[0])); return;
      case Op::kClip: at::hardtanh_backward_out(dx, dy, view(a.src[0]), lo_, hi_); return;
    }
  }

  Op op_ = Op::kRelu;
  float alpha_ = 0.01f, lo_ = 0, hi_ = 0;
};

class BinaryKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    op_ = ctx.node->op_type[0];  // A(dd), S(ub), M(ul), D(iv)
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return op_ == 'M' || op_ == 'D'; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor y = view(dst[0]);
    const at::Tensor a = view(src[0]), b = view(src[1]);
    switch (op_) {
      case 'A': at::add_out(y, a, b); return;
      case 'S': at::sub_out(y, a, b); return;
      case 'M': at::mul_out(y, a, b); return;
      default: at::div_out(y, a, b); return;
    }
  }
  // The gradient of each operand, summed over the axes it was broadcast along.
  void run_backward(const BackwardArgs& g) override {
    const at::Tensor dy = view(g.diff_dst[0]);
    Tensor* da = g.diff_src[0];
    Tensor* db = g.diff_src.size() > 1 ? g.diff_src[1] : nullptr;
    const bool reads = op_ == 'M' || op_ == 'D';
    const at::Tensor a = reads ? view(g.src[0]) : at::Tensor(), b = reads ? view(g.src[1]) : at::Tensor();
    switch (op_) {
      case 'A':
      case 'S':
        if (da) write(reduce_to(dy, a_shape_), da);
        if (db) write(reduce_to(op_ == 'A' ? dy : dy.neg(), b_shape_), db);
        return;
      case 'M':
        if (da) write(reduce_to(dy * b, a_shape_), da);
        if (db) write(reduce_to(dy * a, b_shape_), db);
        return;
      default:
        if (da) write(reduce_to(dy / b, a_shape_), da);
        if (db) write(reduce_to(-dy * a / (b * b), b_shape_), db);
        return;
    }
  }

  char op_ = 'A';
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

Status register_eltwise(PluginRegistrar& r) {
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip"})
    MOSAIC_RETURN_IF_ERROR(r.add_kernel(kName, op, make_factory<UnaryKernel>()));
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    MOSAIC_RETURN_IF_ERROR(r.add_kernel(kName, op, make_factory<BinaryKernel>()));
  for (const char* op : {"Softmax", "LogSoftmax"})
    MOSAIC_RETURN_IF_ERROR(r.add_kernel(kName, op, make_factory<SoftmaxKernel>()));
  return Status::ok();
}

}  // namespace mosaic::torch_backend
