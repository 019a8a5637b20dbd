// torch: MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool over 1-3 spatial axes
// (at::max_pool{2,3}d_with_indices, at::avg_pool{2,3}d, at::adaptive_avg_pool2d and their
// backward functions). A 1-d window runs as a 2-d one over a unit axis.
#include <limits>

#include "backends/torch/torch_kernel.hpp"

namespace mosaic::torch_backend {
namespace {

/// Output length of one axis as ATen computes it (pooling_output_shape): the last window
/// must start inside the input or its left padding when ceil_mode rounds up.
int64_t aten_pool_length(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil) {
  const int64_t span = in + 2 * pad - d * (k - 1) - 1 + (ceil ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil && (out - 1) * s >= in + pad) --out;
  return out;
}

class PoolKernel final : public TorchKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    if (ctx.inputs[0].numel() == 0)  // ATen: "kernel size should be greater than zero"
      return Status::unsupported(label_ + ": ATen pools no empty input (" + shape_str(ctx.inputs[0].shape) + ")");
    const std::string& op = ctx.node->op_type;
    max_ = op == "MaxPool" || op == "GlobalMaxPool";
    if (ctx.has_output(1)) return Status::unsupported(label_ + ": the torch backend does not produce MaxPool's Indices");
    MOSAIC_ASSIGN_OR_RETURN(const PoolParams p, pool_params(ctx));
    const Window& w = p.win;
    const size_t rank = w.rank();
    if (rank < 1 || rank > 3)
      return Status::unsupported(label_ + ": the torch backend pools 1-3 spatial axes, not " + std::to_string(rank));
    adaptive_ = op == "GlobalAveragePool" && rank == 2;
    ceil_ = p.ceil_mode;
    count_include_pad_ = p.count_include_pad;
    x_shape_ = ctx.inputs[0].shape;
    if (rank == 1) {  // [N, C, L] as [N, C, 1, L]
      x_shape_.insert(x_shape_.end() - 1, 1);
      k_ = {1};
      s_ = {1};
      pad_ = {0};
      d_ = {1};
    }
    // ATen pads a window symmetrically and by at most half its size. Other pads (auto_pad
    // SAME with an even window) are padded explicitly: with -inf for max pooling (never a
    // window's maximum), with 0 for average pooling that counts the padding in its divisor
    // (the same divisor then); average pooling that does not count it declines.
    for (size_t a = 0; a < rank; ++a)
      explicit_pad_ = explicit_pad_ || w.pad_begin[a] != w.pad_end[a] || 2 * w.pad_begin[a] > w.kernel[a];
    if (explicit_pad_ && !max_ && !count_include_pad_)
      return Status::unsupported(label_ + ": ATen pads an average pool that excludes the padding from its divisor "
                                          "symmetrically and by at most half its window");
    for (size_t a = 0; a < rank; ++a) {
      if (!max_ && w.dilation[a] != 1) return Status::unsupported(label_ + ": ATen has no dilated average pooling");
      const int64_t in = explicit_pad_ ? w.in[a] + w.pad_begin[a] + w.pad_end[a] : w.in[a];
      const int64_t pad = explicit_pad_ ? 0 : w.pad_begin[a];
      if (aten_pool_length(in, w.kernel[a], w.stride[a], pad, w.dilation[a], ceil_) != w.out[a])
        return Status::unsupported(label_ + ": ATen's ceil_mode gives another output length on axis " +
                                   std::to_string(a));
      k_.push_back(w.kernel[a]);
      s_.push_back(w.stride[a]);
      pad_.push_back(pad);
      d_.push_back(w.dilation[a]);
    }
    for (size_t a = rank; explicit_pad_ && a-- > 0;) {  // last axis first, as constant_pad_nd takes them
      explicit_.push_back(w.pad_begin[a]);
      explicit_.push_back(w.pad_end[a]);
    }
    begin_.assign(k_.size() - rank, 0);  // the unit axis of a 1-d window
    for (size_t a = 0; a < rank; ++a) begin_.push_back(w.pad_begin[a]);
    y_shape_ = x_shape_;
    for (size_t a = 0; a < k_.size(); ++a)
      y_shape_[2 + a] = rank == 1 && a == 0 ? 1 : w.out[rank == 1 ? 0 : a];
    three_d_ = k_.size() == 3;
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return true; }  // ATen's backward takes x (its shape)
  bool backward_reads_output(size_t) const override { return false; }
  size_t workspace_bytes() const override { return indices_.defined() ? indices_.nbytes() : 0; }

 private:
  at::Tensor x(const Tensor* t) const {
    const at::Tensor v = view(t).view(at::IntArrayRef(x_shape_));
    return explicit_pad_ ? at::constant_pad_nd(v, explicit_, max_ ? -std::numeric_limits<double>::infinity() : 0.0) : v;
  }
  at::Tensor dy(const Tensor* t) const { return view(t).view(at::IntArrayRef(y_shape_)); }

  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const at::Tensor in = x(src[0]);
    at::Tensor y;
    if (max_) {
      auto [out, idx] = three_d_ ? at::max_pool3d_with_indices(in, k_, s_, pad_, d_, ceil_)
                                 : at::max_pool2d_with_indices(in, k_, s_, pad_, d_, ceil_);
      if (training_) indices_ = idx;  // backward routes each gradient to its window's argmax
      y = out;
    } else if (adaptive_) {
      y = at::adaptive_avg_pool2d(in, {1, 1});
    } else {
      y = three_d_ ? at::avg_pool3d(in, k_, s_, pad_, ceil_, count_include_pad_)
                   : at::avg_pool2d(in, k_, s_, pad_, ceil_, count_include_pad_);
    }
    write(y, dst[0]);
  }

  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    const at::Tensor g = dy(a.diff_dst[0]), in = x(a.src[0]);
    at::Tensor dx;
    if (max_) {
      dx = three_d_ ? at::max_pool3d_with_indices_backward(g, in, k_, s_, pad_, d_, ceil_, indices_)
                    : at::max_pool2d_with_indices_backward(g, in, k_, s_, pad_, d_, ceil_, indices_);
    } else if (adaptive_) {
      dx = at::_adaptive_avg_pool2d_backward(g, in);
    } else {
      dx = three_d_ ? at::avg_pool3d_backward(g, in, k_, s_, pad_, ceil_, count_include_pad_, c10::nullopt)
                    : at::avg_pool2d_backward(g, in, k_, s_, pad_, ceil_, count_include_pad_, c10::nullopt);
    }
    for (size_t j = 0; explicit_pad_ && j < begin_.size(); ++j)  // the input's part of the padded gradient
      dx = dx.narrow(static_cast<int64_t>(2 + j), begin_[j], x_shape_[2 + j]);
    write(dx, a.diff_src[0]);
  }

  bool explicit_pad_ = false;
  std::vector<int64_t> explicit_, begin_;
  bool max_ = false, adaptive_ = false, ceil_ = false, count_include_pad_ = false, three_d_ = false;
  std::vector<int64_t> k_, s_, pad_, d_;
  Shape x_shape_, y_shape_;
  at::Tensor indices_;
};

}  // namespace

void add_pool_kernels(BackendRegistration& r) {
  for (const char* op : {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"}) r.kernel(op, make_factory<PoolKernel>());
}

}  // namespace mosaic::torch_backend
