// torch: BatchNormalization (at::native_batch_norm and its backward, the functions
// torch.nn.BatchNorm2d calls), Concat (at::cat), Split (narrow), constant Pad (at::constant_pad_nd), and
// the view ops, which move no data (Mosaic's view kernel).
#include "backends/common/movement.hpp"
#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {
namespace {

class BatchNormKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    for (size_t i = 1; i < ctx.outputs.size(); ++i)
      if (ctx.has_output(i))
        return Status::unsupported(label_ + ": the torch backend writes BatchNormalization's Y only");
    if (ctx.inputs[0].shape.size() < 2) return Status::unsupported(label_ + ": BatchNormalization of rank < 2");
    const BatchNormParams p = batch_norm_params(*ctx.node, ctx.inputs[0].shape);
    eps_ = p.epsilon;
    // ONNX: running = momentum * running + (1 - momentum) * batch; PyTorch weighs the
    // batch statistic by its momentum. Both update the variance with the unbiased estimate.
    momentum_ = 1.0 - p.momentum;
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i != 2; }
  bool backward_reads_output(size_t) const override { return false; }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    // The running statistics are updated in place, as every backend does in training.
    auto [y, mean, invstd] = at::native_batch_norm(view(src[0]), view(src[1]), view(src[2]), view(src[3]),
                                                   view(src[4]), training_, momentum_, eps_);
    if (training_) {
      save_mean_ = mean;
      save_invstd_ = invstd;
    }
    write(y, dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    Tensor* dx = a.diff_src[0];
    Tensor* dscale = a.diff_src.size() > 1 ? a.diff_src[1] : nullptr;
    Tensor* dbias = a.diff_src.size() > 2 ? a.diff_src[2] : nullptr;
    auto [gx, gscale, gbias] = at::native_batch_norm_backward(
        view(a.diff_dst[0]), view(a.src[0]), view(a.src[1]), view(a.src[3]), view(a.src[4]), save_mean_,
        save_invstd_, training_, eps_, {dx != nullptr, dscale != nullptr, dbias != nullptr});
    if (dx) write(gx, dx);
    if (dscale) write(gscale, dscale);
    if (dbias) write(gbias, dbias);
    for (size_t i = 3; i < a.diff_src.size(); ++i)  // running statistics get no gradient
      if (a.diff_src[i]) view(a.diff_src[i]).zero_();
  }
  double eps_ = 1e-5, momentum_ = 0.1;
  at::Tensor save_mean_, save_invstd_;
};

/// A kernel whose backward needs only the output gradient (and the shapes it kept).
class MovementKernel : public TorchKernel {
 public:
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
};

class ConcatKernel final : public MovementKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const int64_t rank = static_cast<int64_t>(ctx.outputs[0].shape.size());
    MOSAIC_ASSIGN_OR_RETURN(axis_, normalize_axis(ctx.node->attr_int("axis", 0), rank, *ctx.node));
    for (const TensorDesc& d : ctx.inputs) sizes_.push_back(d.shape.empty() ? 0 : d.shape[static_cast<size_t>(axis_)]);
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    std::vector<at::Tensor> parts;
    for (const Tensor* t : src) parts.push_back(view(t));
    at::Tensor y = view(dst[0]);
    at::cat_out(y, parts, axis_);
  }
  void run_backward(const BackwardArgs& a) override {
    const at::Tensor dy = view(a.diff_dst[0]);
    int64_t offset = 0;
    for (size_t i = 0; i < a.diff_src.size(); ++i) {
      if (a.diff_src[i]) write(dy.narrow(axis_, offset, sizes_[i]), a.diff_src[i]);
      offset += sizes_[i];
    }
  }
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
};

/// Split (narrow per output, what torch.split returns as views, copied out); backward
/// concatenates the outputs' gradients, zeros where an output has none.
class SplitKernel final : public MovementKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx, 1));  // split lengths are int64
    MOSAIC_ASSIGN_OR_RETURN(p_, split_params(ctx));
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const at::Tensor x = view(src[0]);
    int64_t offset = 0;
    for (size_t i = 0; i < p_.sizes.size(); ++i) {
      if (dst[i]) write(x.narrow(p_.axis, offset, p_.sizes[i]), dst[i]);
      offset += p_.sizes[i];
    }
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    std::vector<at::Tensor> parts;
    for (size_t i = 0; i < p_.sizes.size(); ++i) {
      const Tensor* dy = i < a.diff_dst.size() ? a.diff_dst[i] : nullptr;
      if (dy) {
        parts.push_back(view(dy));
      } else {
        std::vector<int64_t> shape = a.diff_src[0]->shape();
        shape[static_cast<size_t>(p_.axis)] = p_.sizes[i];
        parts.push_back(at::zeros(shape, at::kFloat));
      }
    }
    at::Tensor dx = view(a.diff_src[0]);
    at::cat_out(dx, parts, p_.axis);
  }
  SplitParams p_;
};

/// Constant padding (at::constant_pad_nd, what torch.nn.functional.pad calls); its
/// gradient is the output gradient with the padding cut off.
class PadKernel final : public MovementKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx, 1));  // pads are int64
    MOSAIC_ASSIGN_OR_RETURN(const PadParams p, pad_params(ctx));
    if (p.mode != "constant") return Status::unsupported(label_ + ": the torch backend pads with a constant only");
    if (p.value_at_run_time) return Status::unsupported(label_ + ": the torch backend needs a constant pad value");
    in_ = ctx.inputs[0].shape;
    const size_t rank = in_.size();
    for (size_t a = 0; a < rank; ++a) begin_.push_back(p.pads[a]);
    for (size_t a = rank; a-- > 0;) {  // last axis first, as constant_pad_nd takes them
      pads_.push_back(p.pads[a]);
      pads_.push_back(p.pads[rank + a]);
    }
    if (ctx.training && std::any_of(p.pads.begin(), p.pads.end(), [](int64_t v) { return v < 0; }))
      return Status::unsupported(label_ + ": the torch backend has no backward for negative pads");
    value_ = p.value;
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    write(at::constant_pad_nd(view(src[0]), pads_, value_), dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    at::Tensor g = view(a.diff_dst[0]);
    for (size_t d = 0; d < in_.size(); ++d) g = g.narrow(static_cast<int64_t>(d), begin_[d], in_[d]);
    write(g, a.diff_src[0]);
  }
  Shape in_;
  std::vector<int64_t> begin_, pads_;
  float value_ = 0;
};

}  // namespace

void add_norm_movement_kernels(BackendRegistration& r) {
  r.kernel("BatchNormalization", make_factory<BatchNormKernel>())
      .kernel("Concat", make_factory<ConcatKernel>())
      .kernel("Split", make_factory<SplitKernel>())
      .kernel("Pad", make_factory<PadKernel>());
  // The views move no data: Mosaic's view kernel (the output is the input's memory).
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) r.kernel(op, view_kernel_factory());
  r.kernel("Dropout", [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    if (ctx.training || ctx.has_output(1))  // its mask is drawn from Mosaic's generator, on naive
      return Status::unsupported(ctx.node->label() + ": the torch backend has no Dropout with a mask (training or a mask output)");
    return view_kernel_factory()(ctx);
  });
}

}  // namespace mosaic::torch_backend
