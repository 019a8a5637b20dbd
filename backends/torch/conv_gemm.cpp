// torch: Conv (at::convolution / at::convolution_backward), Gemm (at::addmm, at::mm) and
// MatMul (at::matmul), with the activation the fusion pass folds into Conv and Gemm.
#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {
namespace {

/// The activation folded into a Conv/Gemm (inference plans only), applied in place.
void apply_activation(const Activation& act, at::Tensor y) {
  if (act.active()) torch_unary(*act.op)->forward(y, y, act.args);  // checked in refuse_fused_in_training
}

Status refuse_fused_in_training(const KernelContext& ctx, const Activation& act) {
  if (act.active() && !torch_unary(*act.op))
    return Status::unsupported(ctx.node->label() + ": the torch backend has no ATen function for the fused " +
                               unary_info(*act.op).name);
  if (act.active() && ctx.training)
    return Status::unsupported(ctx.node->label() + ": backward of a fused activation (training plans do not fuse)");
  return Status::ok();
}

class ConvKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const ConvParams p, conv_params(ctx));
    act_ = fused_activation(*ctx.node);
    MOSAIC_RETURN_IF_ERROR(refuse_fused_in_training(ctx, act_));
    const size_t rank = p.win.rank();
    if (rank < 1 || rank > 3)
      return Status::unsupported(label_ + ": the torch backend convolves 1-3 spatial axes, not " + std::to_string(rank));
    group_ = p.group;
    stride_ = p.win.stride;
    dilation_ = p.win.dilation;
    in_ = p.win.in;
    // ATen pads symmetrically: the common part goes to at::convolution, the rest (auto_pad
    // SAME with an even kernel) is padded explicitly, last axis first as constant_pad_nd
    // takes it, and cut off the input gradient again.
    for (size_t a = 0; a < rank; ++a) {
      const int64_t common = std::min(p.win.pad_begin[a], p.win.pad_end[a]);
      pad_.push_back(common);
      extra_begin_.push_back(p.win.pad_begin[a] - common);
      extra_end_.push_back(p.win.pad_end[a] - common);
    }
    for (size_t a = rank; a-- > 0;) {
      extra_.push_back(extra_begin_[a]);
      extra_.push_back(extra_end_[a]);
    }
    asymmetric_ = std::any_of(extra_.begin(), extra_.end(), [](int64_t v) { return v != 0; });
    out_pad_.assign(rank, 0);
    has_bias_ = p.has_bias;
    bias_sizes_ = {p.oc};
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i < 2; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  at::Tensor padded(const Tensor* x) const {
    return asymmetric_ ? at::constant_pad_nd(view(x), extra_, 0) : view(x);
  }
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const c10::optional<at::Tensor> bias = has_bias_ ? c10::optional<at::Tensor>(view(src[2])) : c10::nullopt;
    at::Tensor y = at::convolution(padded(src[0]), view(src[1]), bias, stride_, pad_, dilation_, false, out_pad_, group_);
    write(y, dst[0]);
    apply_activation(act_, view(dst[0]));
  }
  void run_backward(const BackwardArgs& a) override {
    Tensor* dx = a.diff_src[0];
    Tensor* dw = a.diff_src.size() > 1 ? a.diff_src[1] : nullptr;
    Tensor* db = has_bias_ && a.diff_src.size() > 2 ? a.diff_src[2] : nullptr;
    const std::array<bool, 3> mask{dx != nullptr, dw != nullptr, db != nullptr};
    auto [gx, gw, gb] = at::convolution_backward(view(a.diff_dst[0]), padded(a.src[0]), view(a.src[1]),
                                                 has_bias_ ? at::OptionalIntArrayRef(bias_sizes_) : c10::nullopt,
                                                 stride_, pad_, dilation_, false, out_pad_, group_, mask);
    if (dx) {
      for (size_t s = 0; asymmetric_ && s < in_.size(); ++s) gx = gx.narrow(static_cast<int64_t>(2 + s), extra_begin_[s], in_[s]);
      write(gx, dx);
    }
    if (dw) write(gw, dw);
    if (db) write(gb, db);
  }

  Activation act_;
  int64_t group_ = 1;
  std::vector<int64_t> stride_, dilation_, pad_, in_, extra_begin_, extra_end_, extra_, out_pad_, bias_sizes_;
  bool asymmetric_ = false, has_bias_ = false;
};

class GemmKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    act_ = fused_activation(*ctx.node);
    MOSAIC_RETURN_IF_ERROR(refuse_fused_in_training(ctx, act_));
    if (p_.has_c) c_shape_ = ctx.inputs[2].shape;
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i < 2; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  at::Tensor a(const Tensor* t) const { return p_.trans_a ? view(t).t() : view(t); }  // op(A): [M, K]
  at::Tensor b(const Tensor* t) const { return p_.trans_b ? view(t).t() : view(t); }  // op(B): [K, N]

  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor y = view(dst[0]);
    if (p_.has_c && p_.beta != 0) {
      at::addmm_out(y, view(src[2]), a(src[0]), b(src[1]), p_.beta, p_.alpha);
    } else {
      at::mm_out(y, a(src[0]), b(src[1]));
      if (p_.alpha != 1) y.mul_(p_.alpha);
    }
    apply_activation(act_, y);
  }
  // Y = alpha op(A) op(B) + beta C: d op(A) = alpha dY op(B)^T, d op(B) = alpha op(A)^T dY,
  // written straight into A's and B's own orientation.
  void run_backward(const BackwardArgs& g) override {
    const at::Tensor dy = view(g.diff_dst[0]);
    if (Tensor* da = g.diff_src[0]) {
      at::Tensor out = view(da);
      if (p_.trans_a) at::mm_out(out, b(g.src[1]), dy.t());
      else at::mm_out(out, dy, b(g.src[1]).t());
      if (p_.alpha != 1) out.mul_(p_.alpha);
    }
    if (Tensor* db = g.diff_src.size() > 1 ? g.diff_src[1] : nullptr) {
      at::Tensor out = view(db);
      if (p_.trans_b) at::mm_out(out, dy.t(), a(g.src[0]));
      else at::mm_out(out, a(g.src[0]).t(), dy);
      if (p_.alpha != 1) out.mul_(p_.alpha);
    }
    if (Tensor* dc = g.diff_src.size() > 2 ? g.diff_src[2] : nullptr) write(reduce_to(dy, c_shape_) * p_.beta, dc);
  }

  GemmParams p_;
  Activation act_;
  Shape c_shape_;
};

class MatMulKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    if (ctx.training && (a_shape_.size() < 2 || b_shape_.size() < 2))
      return Status::unsupported(label_ + ": torch MatMul backward needs operands of rank 2 or more");
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    write(at::matmul(view(src[0]), view(src[1])), dst[0]);
  }
  // dA = dY B^T and dB = A^T dY per batch element, summed over the batch axes each operand
  // was broadcast along.
  void run_backward(const BackwardArgs& g) override {
    const at::Tensor dy = view(g.diff_dst[0]);
    if (Tensor* da = g.diff_src[0]) write(reduce_to(at::matmul(dy, view(g.src[1]).transpose(-1, -2)), a_shape_), da);
    if (Tensor* db = g.diff_src.size() > 1 ? g.diff_src[1] : nullptr)
      write(reduce_to(at::matmul(view(g.src[0]).transpose(-1, -2), dy), b_shape_), db);
  }
  Shape a_shape_, b_shape_;
};

}  // namespace

void add_conv_gemm_kernels(BackendRegistration& r) {
  r.kernel("Conv", make_factory<ConvKernel>())
      .kernel("Gemm", make_factory<GemmKernel>())
      .kernel("MatMul", make_factory<MatMulKernel>());
}

}  // namespace mosaic::torch_backend
