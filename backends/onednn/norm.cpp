// The oneDNN backend's normalisation: softmax and log-softmax, batch normalisation, LRN.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

class SoftmaxKernel final : public SrcDstPrimitive {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(SoftmaxParams p, softmax_params(ctx));
    const bool log = ctx.node->op_type == "LogSoftmax";
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc md = plain({p.outer, p.axis_dim, p.inner});
      const algorithm alg = log ? algorithm::softmax_log : algorithm::softmax_accurate;
      dnnl::softmax_v2_forward::desc d(ctx.training ? prop_kind::forward_training : prop_kind::forward_inference, alg,
                                       md, md, 1);
      dnnl::softmax_v2_forward::primitive_desc pd(d, engine());
      set(dnnl::softmax_v2_forward(pd), md, md);
      if (ctx.training) {
        dnnl::softmax_v2_backward::desc bd(alg, md, md, md, 1);
        bwd_ = dnnl::softmax_v2_backward(dnnl::softmax_v2_backward::primitive_desc(bd, engine(), pd));
        for (auto* b : {&b_dst_, &b_diff_dst_, &b_diff_src_}) b->mem = memory(md, engine(), DNNL_MEMORY_NONE);
        trainable_ = true;
      }
      return Status::ok();
    });
  }
  bool has_backward() const override { return trainable_; }
  bool backward_reads_input(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    b_dst_.bind(a.dst[0]);
    b_diff_dst_.bind(a.diff_dst[0]);
    b_diff_src_.bind(a.diff_src[0]);
    bwd_.execute(stream(), {{DNNL_ARG_DST, b_dst_.mem}, {DNNL_ARG_DIFF_DST, b_diff_dst_.mem},
                            {DNNL_ARG_DIFF_SRC, b_diff_src_.mem}});
    stream().wait();
    return Status::ok();
  }

 private:
  bool trainable_ = false;
  dnnl::softmax_v2_backward bwd_;
  Bound b_dst_, b_diff_dst_, b_diff_src_;
};

class BatchNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Shape& x = ctx.inputs[0].shape;
    const BatchNormParams p = batch_norm_params(*ctx.node, x);
    c_ = p.channels;
    m_ = p.batch * p.spatial;
    training_ = ctx.training;
    momentum_ = p.momentum;
    if (training_ && ctx.input_layout(0))
      return Status::unsupported(ctx.node->label() + ": training on a blocked input layout");
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc md = input_md(ctx, 0);
      const float eps = p.epsilon;
      auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      if (!training_) flags = flags | dnnl::normalization_flags::use_global_stats;
      dnnl::batch_normalization_forward::desc d(
          training_ ? prop_kind::forward_training : prop_kind::forward_inference, md, eps, flags);
      dnnl::batch_normalization_forward::primitive_desc pd(d, engine());
      prim_ = dnnl::batch_normalization_forward(pd);
      const memory::desc cmd = plain({c_});
      src_.mem = memory(md, engine(), DNNL_MEMORY_NONE);
      const memory::desc out_md = ctx.layout_free(0) ? md : plain(x);
      dst_.init(out_md, md, ctx.tracker, true);
      out_layout_ = layout_of(out_md, x);
      for (auto* b : {&scale_, &shift_, &mean_, &var_}) b->mem = memory(cmd, engine(), DNNL_MEMORY_NONE);
      if (training_) {
        // Batch statistics land in kernel-owned buffers; the running averages are updated
        // from them, and backward differentiates through them.
        batch_mean_ = memory(cmd, engine());
        batch_var_ = memory(cmd, engine());
        dnnl::batch_normalization_backward::desc bd(prop_kind::backward, md, md, eps,
                                                    dnnl::normalization_flags::use_scale |
                                                        dnnl::normalization_flags::use_shift);
        bwd_ = dnnl::batch_normalization_backward(dnnl::batch_normalization_backward::primitive_desc(bd, engine(), pd));
        for (auto* b : {&b_src_, &b_diff_dst_, &b_diff_src_}) b->mem = memory(md, engine(), DNNL_MEMORY_NONE);
        diff_scale_ = memory(cmd, engine());
        diff_shift_ = memory(cmd, engine());
      }
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    src_.bind(src[0]);
    scale_.bind(src[1]);
    shift_.bind(src[2]);
    dst_.bind_out(dst[0]);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_.mem},
                                         {DNNL_ARG_SCALE, scale_.mem},
                                         {DNNL_ARG_SHIFT, shift_.mem},
                                         {DNNL_ARG_DST, dst_.internal}};
    if (training_) {
      args[DNNL_ARG_MEAN] = batch_mean_;
      args[DNNL_ARG_VARIANCE] = batch_var_;
    } else {
      mean_.bind(src[3]);
      var_.bind(src[4]);
      args[DNNL_ARG_MEAN] = mean_.mem;
      args[DNNL_ARG_VARIANCE] = var_.mem;
    }
    prim_.execute(stream(), args);
    dst_.finish_out();
    stream().wait();
    if (training_) {
      // Running averages as ONNX/PyTorch: r = momentum r + (1 - momentum) batch, with the
      // unbiased variance (oneDNN's is biased).
      auto* rm = const_cast<float*>(src[3]->f32());
      auto* rv = const_cast<float*>(src[4]->f32());
      const float* bm = static_cast<const float*>(batch_mean_.get_data_handle());
      const float* bv = static_cast<const float*>(batch_var_.get_data_handle());
      const double unbias = m_ > 1 ? static_cast<double>(m_) / static_cast<double>(m_ - 1) : 1.0;
      for (int64_t c = 0; c < c_; ++c) {
        rm[c] = static_cast<float>(momentum_ * rm[c] + (1 - momentum_) * bm[c]);
        rv[c] = static_cast<float>(momentum_ * rv[c] + (1 - momentum_) * bv[c] * unbias);
      }
    }
    return Status::ok();
  }
  size_t workspace_bytes() const override { return dst_.bytes + (training_ ? 4 * c_ * sizeof(float) : 0); }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }
  bool has_backward() const override { return training_; }
  /// oneDNN's backward through the batch statistics: diff_src, diff_scale, diff_shift.
  Status backward(const BackwardArgs& a) override {
    b_src_.bind(a.src[0]);
    scale_.bind(a.src[1]);
    shift_.bind(a.src[2]);
    b_diff_dst_.bind(a.diff_dst[0]);
    std::vector<float> scratch;
    bind_diff_src(b_diff_src_, a.diff_src[0], scratch, m_ * c_);
    bwd_.execute(stream(), {{DNNL_ARG_SRC, b_src_.mem},
                            {DNNL_ARG_MEAN, batch_mean_},
                            {DNNL_ARG_VARIANCE, batch_var_},
                            {DNNL_ARG_DIFF_DST, b_diff_dst_.mem},
                            {DNNL_ARG_SCALE, scale_.mem},
                            {DNNL_ARG_SHIFT, shift_.mem},
                            {DNNL_ARG_DIFF_SRC, b_diff_src_.mem},
                            {DNNL_ARG_DIFF_SCALE, diff_scale_},
                            {DNNL_ARG_DIFF_SHIFT, diff_shift_}});
    stream().wait();
    copy_scale_shift_grads(a, diff_scale_, diff_shift_, c_);
    for (size_t i = 3; i < a.diff_src.size(); ++i)
      if (a.diff_src[i]) std::fill(a.diff_src[i]->f32(), a.diff_src[i]->f32() + c_, 0.f);
    return Status::ok();
  }

 private:
  int64_t c_ = 0, m_ = 0;
  bool training_ = false;
  float momentum_ = 0.9f;
  Bound src_, scale_, shift_, mean_, var_;
  Staged dst_;
  std::shared_ptr<const Layout> out_layout_;
  dnnl::batch_normalization_forward prim_;
  memory batch_mean_, batch_var_, diff_scale_, diff_shift_;
  dnnl::batch_normalization_backward bwd_;
  Bound b_src_, b_diff_dst_, b_diff_src_;
};

class LrnKernel final : public SrcDstPrimitive {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(LrnParams p, lrn_params(ctx));
    if (p.size % 2 == 0)
      return Status::unsupported(ctx.node->label() + ": even LRN size (oneDNN's window is symmetric, ONNX's is not)");
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc md = plain(ctx.inputs[0].shape);
      dnnl::lrn_forward::desc d(ctx.training ? prop_kind::forward_training : prop_kind::forward_inference,
                                algorithm::lrn_across_channels, md, p.size, p.alpha, p.beta, p.bias);
      dnnl::lrn_forward::primitive_desc pd(d, engine());
      set(dnnl::lrn_forward(pd), md, md);
      if (ctx.training) {
        dnnl::lrn_backward::desc bd(algorithm::lrn_across_channels, md, md, p.size, p.alpha, p.beta, p.bias);
        bwd_ = dnnl::lrn_backward(dnnl::lrn_backward::primitive_desc(bd, engine(), pd));
        if (pd.workspace_desc().get_size()) workspace_ = memory(pd.workspace_desc(), engine());
        for (auto* b : {&b_src_, &b_diff_dst_, &b_diff_src_}) b->mem = memory(md, engine(), DNNL_MEMORY_NONE);
        trainable_ = true;
      }
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (!trainable_) return SrcDstPrimitive::forward(src, dst);
    src_.bind(src[0]);
    dst_.bind(dst[0]);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_.mem}, {DNNL_ARG_DST, dst_.mem}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    prim_.execute(stream(), args);
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override { return workspace_ ? workspace_.get_desc().get_size() : 0; }
  bool has_backward() const override { return trainable_; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    b_src_.bind(a.src[0]);
    b_diff_dst_.bind(a.diff_dst[0]);
    b_diff_src_.bind(a.diff_src[0]);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, b_src_.mem}, {DNNL_ARG_DIFF_DST, b_diff_dst_.mem}, {DNNL_ARG_DIFF_SRC, b_diff_src_.mem}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    bwd_.execute(stream(), args);
    stream().wait();
    return Status::ok();
  }

 private:
  bool trainable_ = false;
  dnnl::lrn_backward bwd_;
  memory workspace_;
  Bound b_src_, b_diff_dst_, b_diff_src_;
};

}  // namespace

void add_norm_kernels(BackendRegistration& r) {
  r.kernel("Softmax", make_factory<SoftmaxKernel>());
  r.kernel("LogSoftmax", make_factory<SoftmaxKernel>());
  r.kernel("BatchNormalization", make_factory<BatchNormKernel>(), {LayoutUse::kInference, {}});
  r.kernel("LRN", make_factory<LrnKernel>());
}

}  // namespace mosaic::onednn_impl
