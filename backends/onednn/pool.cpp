// The oneDNN backend's pooling: max, average and their global forms, forward and backward.
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/common/pooling.hpp"
#include "backends/common/support.hpp"
#include "backends/onednn/onednn.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

class PoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(PoolParams p, pool_params(ctx));
    // An empty window's mean or maximum (a global pool over a map of width 0): oneDNN creates
    // no primitive for it; naive's ONNX answer runs instead.
    if (ctx.inputs[0].numel() == 0)
      return Status::unsupported(ctx.node->label() + ": oneDNN pools no empty input (" +
                                 shape_str(ctx.inputs[0].shape) + ")");
    const bool is_max = ctx.node->op_type.find("Max") != std::string::npos;
    return guarded(*ctx.node, [&]() -> Status {
      memory::dims strides(p.win.stride.begin(), p.win.stride.end()), kernel(p.win.kernel.begin(), p.win.kernel.end());
      memory::dims dil, pl(p.win.pad_begin.begin(), p.win.pad_begin.end()), pr(p.win.rank());
      for (auto d : p.win.dilation) dil.push_back(d - 1);
      bool extra_pad = false;
      for (size_t i = 0; i < p.win.rank(); ++i) {
        pr[i] = (p.win.out[i] - 1) * p.win.stride[i] + (p.win.kernel[i] - 1) * p.win.dilation[i] + 1 - p.win.in[i] - pl[i];
        extra_pad = extra_pad || pr[i] > p.win.pad_end[i];
        if (pr[i] < 0) pr[i] = 0;
      }
      if (!is_max && p.count_include_pad && extra_pad)
        return Status::unsupported(ctx.node->label() +
                                   ": ceil_mode windows past the padding with count_include_pad (divisor differs)");
      const algorithm alg = is_max ? algorithm::pooling_max
                                   : (p.count_include_pad ? algorithm::pooling_avg_include_padding
                                                          : algorithm::pooling_avg_exclude_padding);
      const Shape& ys = ctx.outputs[0].shape;
      if (!ctx.training && is_max && own_max_pool(ctx, p)) return Status::ok();
      // Pool in the input's layout; the output follows it (reordered to plain if needed).
      memory::desc src = input_md(ctx, 0);
      // A plain NCHW input in inference (a QDQ model's DequantizeLinear output, a pool right
      // after the graph input): oneDNN's only plain pool, simple_nchw, walks one plane at a
      // time, 10-20x slower than its JIT pool on channel blocks, so the input is reordered
      // into blocks first (fmnist-cnn's first pool at batch 64: 8.6 ms -> see docs/performance.md).
      const Shape& xs = ctx.inputs[0].shape;
      if (!ctx.training && !ctx.input_layout(0) && xs.size() == 4 && xs[1] >= 8) {
        const bool wide = onednn_effective_isa().find("avx512") != std::string::npos;
        const memory::desc blocked(memory::dims(xs.begin(), xs.end()), dt::f32, wide ? tag::nChw16c : tag::nChw8c);
        src_staged_.init(src, blocked, ctx.tracker, false);
        staged_ = true;
        src = blocked;
      }
      dnnl::pooling_v2_forward::desc d(prop_kind::forward_inference, alg, src, any(ys), strides, kernel, dil, pl, pr);
      dnnl::pooling_v2_forward::primitive_desc pd(d, engine());
      src_.mem = memory(src, engine(), DNNL_MEMORY_NONE);
      const memory::desc out_md = ctx.layout_free(0) ? pd.dst_desc() : plain(ys);
      dst_.init(out_md, pd.dst_desc(), ctx.tracker, true);
      out_layout_ = layout_of(out_md, ys);
      prim_ = dnnl::pooling_v2_forward(pd);
      const int lanes = ctx.input_layout(0) ? channel_lanes(src) : 0;
      if (ctx.training && ctx.input_layout(0) && (!is_max || !lanes || channel_lanes(pd.dst_desc()) != lanes))
        return Status::unsupported(ctx.node->label() + ": training pool in layout " + ctx.input_layout(0)->name());
      if (ctx.training && lanes) {
        // Max pooling on channel-blocked tensors: the same near-tie rule, lane by lane. The
        // gradient of an output left plain is reordered into the pool's layout first.
        win_ = p.win;
        nc_ = ctx.inputs[0].shape[0] * (src.data.padded_dims[1] / lanes);
        lanes_ = lanes;
        b_diff_dst_staged_.init(out_md, pd.dst_desc(), ctx.tracker, false, 1);
        max_backward_ = true;
        trainable_ = true;
      } else if (ctx.training && !ctx.input_layout(0) && is_max) {
        // Max-pool backward routes by the shared near-tie rule (common/pooling.hpp), not
        // by oneDNN's workspace: the same subgradient as PyTorch where the forward's
        // rounding split exact ties. The forward stays the inference primitive.
        win_ = p.win;
        nc_ = p.n * p.c;
        max_backward_ = true;
        trainable_ = true;
      } else if (ctx.training && !ctx.input_layout(0)) {
        // Average pooling on plain layouts: oneDNN's training forward and backward.
        const memory::desc xs = plain(ctx.inputs[0].shape), y_md = plain(ys);
        dnnl::pooling_v2_forward::primitive_desc tpd(
            dnnl::pooling_v2_forward::desc(prop_kind::forward_training, alg, xs, y_md, strides, kernel, dil, pl, pr),
            engine());
        train_fwd_ = dnnl::pooling_v2_forward(tpd);
        dnnl::pooling_v2_backward::desc bd(alg, xs, y_md, strides, kernel, dil, pl, pr);
        bwd_ = dnnl::pooling_v2_backward(dnnl::pooling_v2_backward::primitive_desc(bd, engine(), tpd));
        if (tpd.workspace_desc().get_size()) workspace_ = memory(tpd.workspace_desc(), engine());
        t_src_.mem = memory(xs, engine(), DNNL_MEMORY_NONE);
        for (auto* b : {&t_dst_, &b_diff_dst_}) b->mem = memory(y_md, engine(), DNNL_MEMORY_NONE);
        b_diff_src_.mem = memory(xs, engine(), DNNL_MEMORY_NONE);
        trainable_ = true;
      }
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (own_lanes_ >= 0) {
      if (own_unblock_)
        max_pool_forward_interior_unblock(src[0]->f32(), dst[0]->f32(), own_n_, own_c_, own_lanes_, win_);
      else
        max_pool_forward_interior(src[0]->f32(), dst[0]->f32(),
                                  own_lanes_ ? own_n_ * ((own_c_ + own_lanes_ - 1) / own_lanes_) : own_n_ * own_c_,
                                  own_lanes_ ? own_lanes_ : 1, win_);
      return Status::ok();
    }
    if (trainable_ && !max_backward_) {
      t_src_.bind(src[0]);
      t_dst_.bind(dst[0]);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, t_src_.mem}, {DNNL_ARG_DST, t_dst_.mem}};
      if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
      train_fwd_.execute(stream(), args);
      stream().wait();
      return Status::ok();
    }
    if (staged_) {
      src_staged_.bind_in(src[0]);
    } else {
      src_.bind(src[0]);
    }
    dst_.bind_out(dst[0]);
    prim_.execute(stream(), {{DNNL_ARG_SRC, staged_ ? src_staged_.internal : src_.mem}, {DNNL_ARG_DST, dst_.internal}});
    dst_.finish_out();
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override {
    return dst_.bytes + src_staged_.owned_bytes() + (workspace_ ? workspace_.get_desc().get_size() : 0);
  }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }
  bool has_backward() const override { return trainable_; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    if (max_backward_ && lanes_) {
      b_diff_dst_staged_.bind_in(a.diff_dst[0]);
      stream().wait();
      max_pool_backward_lanes(a.src[0]->f32(), static_cast<const float*>(b_diff_dst_staged_.internal.get_data_handle()),
                              a.diff_src[0]->f32(), nc_, lanes_, win_);
      return Status::ok();
    }
    if (max_backward_) {
      max_pool_backward(a.src[0]->f32(), a.diff_dst[0]->f32(), a.diff_src[0]->f32(), nc_, win_);
      return Status::ok();
    }
    b_diff_dst_.bind(a.diff_dst[0]);
    b_diff_src_.bind(a.diff_src[0]);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, b_diff_dst_.mem}, {DNNL_ARG_DIFF_SRC, b_diff_src_.mem}};
    if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
    bwd_.execute(stream(), args);
    stream().wait();
    return Status::ok();
  }

 private:
  /// Inference max pooling whose windows lie inside the input, on a plain input or one in
  /// channel blocks of 8 or 16: Mosaic's loop (common/pooling.cpp) rather than oneDNN 2.6's
  /// pool, which measured 5-9x slower on this work (a 2x2 pool of [64,32,28,28] in
  /// nChw8c: 911 us against 128-170 us; docs/backends.md). A blocked input keeps its blocks
  /// when the consumer takes them, and is otherwise written plain in the same pass.
  bool own_max_pool(const KernelContext& ctx, const PoolParams& p) {
    if (!max_pool_is_interior(p.win)) return false;
    const Shape& xs = ctx.inputs[0].shape;
    const int lanes = ctx.input_layout(0) ? channel_lanes(input_md(ctx, 0)) : 0;
    if (ctx.input_layout(0) && (xs.size() != 4 || (lanes != 8 && lanes != 16))) return false;
    win_ = p.win;
    own_n_ = p.n;
    own_c_ = p.c;
    own_lanes_ = lanes;
    if (lanes && ctx.layout_free(0)) {
      const memory::desc out_md(memory::dims(ctx.outputs[0].shape.begin(), ctx.outputs[0].shape.end()), dt::f32,
                                lanes == 16 ? tag::nChw16c : tag::nChw8c);
      out_layout_ = layout_of(out_md, ctx.outputs[0].shape);
    } else {
      own_unblock_ = lanes != 0;
    }
    return true;
  }

  int own_lanes_ = -1;  ///< >= 0: own_max_pool's loop runs (0: plain input)
  bool own_unblock_ = false;
  int64_t own_n_ = 0, own_c_ = 0;
  Bound src_;
  Staged src_staged_;  ///< a plain input's copy in channel blocks (inference)
  bool staged_ = false;
  Staged dst_;
  std::shared_ptr<const Layout> out_layout_;
  dnnl::pooling_v2_forward prim_;
  bool trainable_ = false, max_backward_ = false;
  Window win_;
  int64_t nc_ = 0;
  int lanes_ = 0;
  Staged b_diff_dst_staged_;
  dnnl::pooling_v2_forward train_fwd_;
  dnnl::pooling_v2_backward bwd_;
  memory workspace_;
  Bound t_src_, t_dst_, b_diff_dst_, b_diff_src_;
};

}  // namespace

void add_pool_kernels(BackendRegistration& r) {
  // Max pooling reads and writes blocked layouts in training too (its backward routes lane
  // by lane); average and global pooling in inference.
  // A QDQ model's pools on 8-bit codes (core/fuse_qdq_codes.cpp) run the shared codes loop.
  r.kernel("MaxPool", with_codes_max_pool(make_factory<PoolKernel>()),
           {LayoutUse::kTraining, float32_pool_or_codes, kPoolOrCodesDTypes});
  for (const char* op : {"AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
    r.kernel(op, make_factory<PoolKernel>(), {LayoutUse::kInference, float32_pool});
}

}  // namespace mosaic::onednn_impl
