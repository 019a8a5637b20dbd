// The oneDNN backend's LayerNormalization: the layer_normalization primitive over the node
// viewed as rows x normalised elements, forward and (with the statistics of the forward
// pass kept by the kernel) backward to the data, Scale and B.
#include <algorithm>
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/common/support.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

class LayerNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, layer_norm_params(ctx));
    if (ctx.has_output(1) || ctx.has_output(2))
      return Status::unsupported(ctx.node->label() + ": LayerNormalization's Mean and InvStdDev outputs");
    training_ = ctx.training;
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc md = plain({p_.outer, p_.inner}), stat = plain({p_.outer}), cmd = plain({p_.inner});
      flags_ = dnnl::normalization_flags::use_scale;
      if (p_.has_bias) flags_ = flags_ | dnnl::normalization_flags::use_shift;
      dnnl::layer_normalization_forward::desc d(training_ ? prop_kind::forward_training : prop_kind::forward_inference,
                                                md, stat, p_.epsilon, flags_);
      dnnl::layer_normalization_forward::primitive_desc pd(d, engine());
      prim_ = dnnl::layer_normalization_forward(pd);
      for (auto* b : {&src_, &dst_}) b->mem = memory(md, engine(), DNNL_MEMORY_NONE);
      for (auto* b : {&scale_, &shift_}) b->mem = memory(cmd, engine(), DNNL_MEMORY_NONE);
      if (training_) {
        // The forward pass's statistics, read by backward.
        mean_ = memory(stat, engine());
        var_ = memory(stat, engine());
        dnnl::layer_normalization_backward::desc bd(prop_kind::backward, md, md, stat, p_.epsilon, flags_);
        bwd_ = dnnl::layer_normalization_backward(dnnl::layer_normalization_backward::primitive_desc(bd, engine(), pd));
        for (auto* b : {&b_diff_dst_, &b_diff_src_}) b->mem = memory(md, engine(), DNNL_MEMORY_NONE);
        diff_scale_ = memory(cmd, engine());
        diff_shift_ = memory(cmd, engine());
      }
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    src_.bind(src[0]);
    scale_.bind(src[1]);
    dst_.bind(dst[0]);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_.mem}, {DNNL_ARG_SCALE, scale_.mem}, {DNNL_ARG_DST, dst_.mem}};
    if (p_.has_bias) {
      shift_.bind(src[2]);
      args[DNNL_ARG_SHIFT] = shift_.mem;
    }
    if (training_) {
      args[DNNL_ARG_MEAN] = mean_;
      args[DNNL_ARG_VARIANCE] = var_;
    }
    prim_.execute(stream(), args);
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override {
    return training_ ? static_cast<size_t>(2 * p_.outer + 2 * p_.inner) * sizeof(float) : 0;
  }
  bool has_backward() const override { return training_; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    src_.bind(a.src[0]);
    scale_.bind(a.src[1]);
    b_diff_dst_.bind(a.diff_dst[0]);
    std::vector<float> scratch;
    bind_diff_src(b_diff_src_, a.diff_src[0], scratch, p_.outer * p_.inner);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_.mem},           {DNNL_ARG_MEAN, mean_},
                                         {DNNL_ARG_VARIANCE, var_},          {DNNL_ARG_DIFF_DST, b_diff_dst_.mem},
                                         {DNNL_ARG_SCALE, scale_.mem},       {DNNL_ARG_DIFF_SRC, b_diff_src_.mem},
                                         {DNNL_ARG_DIFF_SCALE, diff_scale_}};
    if (p_.has_bias) {
      shift_.bind(a.src[2]);
      args[DNNL_ARG_SHIFT] = shift_.mem;
      args[DNNL_ARG_DIFF_SHIFT] = diff_shift_;
    }
    bwd_.execute(stream(), args);
    stream().wait();
    copy_scale_shift_grads(a, diff_scale_, diff_shift_, p_.inner);
    return Status::ok();
  }

 private:
  LayerNormParams p_;
  bool training_ = false;
  dnnl::normalization_flags flags_ = dnnl::normalization_flags::use_scale;
  dnnl::layer_normalization_forward prim_;
  dnnl::layer_normalization_backward bwd_;
  Bound src_, dst_, scale_, shift_, b_diff_dst_, b_diff_src_;
  memory mean_, var_, diff_scale_, diff_shift_;
};

}  // namespace

void add_layer_norm_kernels(BackendRegistration& r) {
  r.kernel("LayerNormalization", make_factory<LayerNormKernel>(), {LayoutUse::kNone, float32_only});
}

}  // namespace mosaic::onednn_impl
