// The oneDNN backend's convolution: forward (fused activation, plain or blocked layouts) and, in
// training, backward data and weights; and ONNX's QLinearConv on oneDNN's int8 convolution.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/common/quantize.hpp"
#include "backends/onednn/onednn.hpp"
#include "backends/onednn/onednn_internal.hpp"
#include "operators/quantize.hpp"

namespace mosaic::onednn_impl {
namespace {

class ConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(ConvParams p, conv_params(ctx));
    return guarded(*ctx.node, [&]() -> Status {
      const Shape& xs = ctx.inputs[0].shape;
      const Shape& ys = ctx.outputs[0].shape;
      Shape ws = ctx.inputs[1].shape;
      if (p.group > 1) {
        ws[0] /= p.group;
        ws.insert(ws.begin(), p.group);
      }
      memory::dims strides(p.win.stride.begin(), p.win.stride.end());
      memory::dims dil, pl(p.win.pad_begin.begin(), p.win.pad_begin.end()), pr(p.win.pad_end.begin(), p.win.pad_end.end());
      for (auto d : p.win.dilation) dil.push_back(d - 1);
      // Make padding_r consistent with the output size (floor division leaves slack).
      for (size_t i = 0; i < p.win.rank(); ++i)
        pr[i] = (p.win.out[i] - 1) * p.win.stride[i] + (p.win.kernel[i] - 1) * p.win.dilation[i] + 1 - p.win.in[i] - pl[i];
      has_bias_ = p.has_bias;
      if (ctx.training && !fused_activation(*ctx.node).active()) return init_training(ctx, xs, ws, ys, p.oc, strides, dil, pl, pr);
      const dt ct = compute_type(ctx);  // bf16 plans: bfloat16 input and weights, float32 output
      auto d = has_bias_ ? dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                                           any(xs, ct), any(ws, ct), plain({p.oc}), any(ys), strides, dil, pl, pr)
                         : dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                                           any(xs, ct), any(ws, ct), any(ys), strides, dil, pl, pr);
      MOSAIC_ASSIGN_OR_RETURN(const dnnl::primitive_attr attr, activation_attr(fused_activation(*ctx.node), *ctx.node));
      dnnl::convolution_forward::primitive_desc pd(d, attr, engine());
      src_.init(input_md(ctx, 0), pd.src_desc(), ctx.tracker, false);
      // Keep oneDNN's output layout when every consumer can read it; else reorder to plain.
      const memory::desc out_md = ctx.layout_free(0) ? pd.dst_desc() : plain(ys);
      dst_.init(out_md, pd.dst_desc(), ctx.tracker, true);
      out_layout_ = layout_of(out_md, ys);
      weights_.init(plain(ws), pd.weights_desc(), ctx.constant(1), ctx.tracker);
      if (has_bias_) bias_.mem = memory(plain({p.oc}), engine(), DNNL_MEMORY_NONE);
      prim_ = dnnl::convolution_forward(pd);
      per_group_gemm_ = p.group > 1 && std::string(pd.impl_info_str()).find("gemm") != std::string::npos;
      return Status::ok();
    });
  }
  /// oneDNN had no direct kernel for this grouped convolution and runs a GEMM per group.
  bool per_group_gemm() const { return per_group_gemm_; }
  size_t workspace_bytes() const override { return src_.owned_bytes() + dst_.owned_bytes() + weights_.bytes(); }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }
  bool has_backward() const override { return trainable_; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    bool diff_dst_ready = false;
    if (a.diff_src[0]) {
      bd_diff_dst_.bind_in(a.diff_dst[0]);
      diff_dst_ready = true;
      bd_diff_src_.bind_out(a.diff_src[0]);
      memory& w = bd_weights_from_forward_ ? weights_.get(a.src[1]) : (bd_w_.bind_in(a.src[1]), bd_w_.internal);
      bwd_data_.execute(stream(), {{DNNL_ARG_DIFF_DST, bd_diff_dst_.internal},
                                   {DNNL_ARG_WEIGHTS, w},
                                   {DNNL_ARG_DIFF_SRC, bd_diff_src_.internal}});
      bd_diff_src_.finish_out();
    }
    if (a.diff_src[1] || (has_bias_ && a.diff_src[2])) {
      // oneDNN computes both weight and bias gradients; missing ones go to scratch.
      Tensor scratch_w, scratch_b;
      Tensor* dw = a.diff_src[1];
      Tensor* db = has_bias_ ? a.diff_src[2] : nullptr;
      if (!dw) dw = &(scratch_w = Tensor::empty({DType::kF32, a.src[1]->shape()}));
      if (has_bias_ && !db) db = &(scratch_b = Tensor::empty({DType::kF32, a.src[2]->shape()}));
      bw_src_.bind_in(a.src[0]);
      memory diff_dst;
      if (bw_diff_dst_from_data_) {
        if (!diff_dst_ready) bd_diff_dst_.bind_in(a.diff_dst[0]);
        diff_dst = bd_diff_dst_.internal;
      } else {
        bw_diff_dst_.bind_in(a.diff_dst[0]);
        diff_dst = bw_diff_dst_.internal;
      }
      bw_diff_w_.bind_out(dw);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, bw_src_.internal}, {DNNL_ARG_DIFF_DST, diff_dst},
                                           {DNNL_ARG_DIFF_WEIGHTS, bw_diff_w_.internal}};
      if (has_bias_) {
        b_diff_b_.bind(db);
        args[DNNL_ARG_DIFF_BIAS] = b_diff_b_.mem;
      }
      bwd_weights_.execute(stream(), args);
      bw_diff_w_.finish_out();
    }
    stream().wait();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    src_.bind_in(src[0]);
    dst_.bind_out(dst[0]);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_.internal},
                                         {DNNL_ARG_WEIGHTS, weights_.get(src[1])},
                                         {DNNL_ARG_DST, dst_.internal}};
    if (has_bias_) {
      bias_.bind(src[2]);
      args[DNNL_ARG_BIAS] = bias_.mem;
    }
    prim_.execute(stream(), args);
    dst_.finish_out();
    stream().wait();
    return Status::ok();
  }

 private:
  Staged src_, dst_;
  Weights weights_;
  Bound bias_;
  bool has_bias_ = false;
  std::shared_ptr<const Layout> out_layout_;
  /// Training: forward, backward-data and backward-weights primitives on the layouts oneDNN
  /// prefers (blocked), with plain tensors reordered in and out around each call. The
  /// blocked copies are transient (shared slots), so the plan's memory stays that of plain
  /// activations and gradients.
  Status init_training(const KernelContext& ctx, const Shape& xs, const Shape& ws, const Shape& ys, int64_t oc,
                       const memory::dims& strides, const memory::dims& dil, const memory::dims& pl,
                       const memory::dims& pr) {
    trainable_ = true;
    const memory::desc b_md = plain({oc});
    // bf16 plans (mixed precision): every product reads bfloat16 copies of its operands (the
    // input, the float32 master weights, the output's gradient) and accumulates and writes
    // float32 (output, data and weight gradients), so the optimizer updates float32 weights.
    const dt ct = compute_type(ctx);
    auto fd = has_bias_ ? dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                                          any(xs, ct), any(ws, ct), b_md, any(ys), strides, dil, pl, pr)
                        : dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                                          any(xs, ct), any(ws, ct), any(ys), strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc fpd(fd, engine());
    dnnl::convolution_backward_data::desc bdd(algorithm::convolution_direct, any(xs), any(ws, ct), any(ys, ct), strides,
                                              dil, pl, pr);
    dnnl::convolution_backward_data::primitive_desc bdpd(bdd, engine(), fpd);
    auto bwd = has_bias_ ? dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any(xs, ct), any(ws),
                                                                    b_md, any(ys, ct), strides, dil, pl, pr)
                         : dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any(xs, ct), any(ws),
                                                                    any(ys, ct), strides, dil, pl, pr);
    dnnl::convolution_backward_weights::primitive_desc bwpd(bwd, engine(), fpd);
    prim_ = dnnl::convolution_forward(fpd);
    bwd_data_ = dnnl::convolution_backward_data(bdpd);
    bwd_weights_ = dnnl::convolution_backward_weights(bwpd);
    // The input (and its gradient) arrive in the producer's layout; the output (and its
    // gradient) stay in the primitive's when every consumer reads it, else plain.
    // Slots: forward src 0 and dst 1; backward diff_dst 2, weights 3, diff_src 4, src 0,
    // diff_dst for weights 5, diff_weights 6.
    const memory::desc x_md = input_md(ctx, 0), y_md = ctx.layout_free(0) ? fpd.dst_desc() : plain(ys);
    out_layout_ = layout_of(y_md, ys);
    src_.init(x_md, fpd.src_desc(), ctx.tracker, false, 0);
    dst_.init(y_md, fpd.dst_desc(), ctx.tracker, true, 1);
    weights_.init(plain(ws), fpd.weights_desc(), nullptr, ctx.tracker);
    if (has_bias_) bias_.mem = memory(b_md, engine(), DNNL_MEMORY_NONE);
    bd_diff_dst_.init(y_md, bdpd.diff_dst_desc(), ctx.tracker, false, 2);
    bd_weights_from_forward_ = bdpd.weights_desc() == fpd.weights_desc();
    if (!bd_weights_from_forward_) bd_w_.init(plain(ws), bdpd.weights_desc(), ctx.tracker, false, 3);
    bd_diff_src_.init(x_md, bdpd.diff_src_desc(), ctx.tracker, true, 4);
    bw_src_.init(x_md, bwpd.src_desc(), ctx.tracker, false, 0);
    bw_diff_dst_from_data_ = bwpd.diff_dst_desc() == bdpd.diff_dst_desc();
    if (!bw_diff_dst_from_data_) bw_diff_dst_.init(y_md, bwpd.diff_dst_desc(), ctx.tracker, false, 5);
    bw_diff_w_.init(plain(ws), bwpd.diff_weights_desc(), ctx.tracker, true, 6);
    b_diff_b_.mem = memory(b_md, engine(), DNNL_MEMORY_NONE);
    return Status::ok();
  }

  bool trainable_ = false;
  dnnl::convolution_backward_data bwd_data_;
  dnnl::convolution_backward_weights bwd_weights_;
  Staged bd_diff_dst_, bd_w_, bd_diff_src_, bw_src_, bw_diff_dst_, bw_diff_w_;
  bool bd_weights_from_forward_ = false, bw_diff_dst_from_data_ = false;
  Bound b_diff_b_;
  dnnl::convolution_forward prim_;
  bool per_group_gemm_ = false;
};

/// Whether a convolution is 1x1 with a stride above 1 and no padding: a 1x1 convolution at
/// stride 1 over every stride-th pixel.
bool strided_pointwise(const Window& win) {
  bool strided = false;
  for (size_t i = 0; i < win.rank(); ++i) {
    if (win.kernel[i] != 1 || win.pad_begin[i] != 0 || win.pad_end[i] != 0) return false;
    strided = strided || win.stride[i] > 1;
  }
  return strided;
}

/// What QLinearConvKernel takes, asked before it is built (the planner's capability query,
/// and the fusion pass that makes QLinearConv of a QDQ model's convolutions): uint8/int8 x
/// and y, int8 weights with zero point 0 whose products this CPU sums exactly, 2-d (grouped or
/// not), every scale, zero point, weight and the int32 bias constant.
Status qlinear_conv_supported(const KernelContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(ConvParams p, quant_conv_params(ctx));
  const Node& n = *ctx.node;
  const DType xt = ctx.inputs[0].dtype, wt = ctx.inputs[3].dtype, yt = ctx.outputs[0].dtype;
  if ((xt != DType::kU8 && xt != DType::kI8) || wt != DType::kI8 || (yt != DType::kU8 && yt != DType::kI8))
    return Status::unsupported(n.label() + ": oneDNN's int8 convolution takes uint8/int8 x and y and int8 weights");
  if (p.win.rank() != 2) return Status::unsupported(n.label() + ": only 2-d int8 convolutions here so far");
  for (size_t i : {1, 2, 3, 4, 5, 6, 7})
    if (!ctx.constant(i)) return Status::unsupported(n.label() + ": input " + std::to_string(i) + " is computed at run time; "
                                                     "oneDNN's int8 convolution takes scales, zero points and weights when built");
  const Tensor* bias = ctx.inputs.size() > 8 && ctx.inputs[8].dtype == DType::kI32 ? ctx.constant(8) : nullptr;
  if (ctx.inputs.size() > 8 && ctx.input_present[8] && !bias) return Status::unsupported(n.label() + ": a bias computed at run time");
  const Tensor& w = *ctx.constant(3);
  const Tensor& w_zp = *ctx.constant(5);
  for (int64_t i = 0; i < w_zp.numel(); ++i)
    if (w_zp.get(i) != 0) return Status::unsupported(n.label() + ": oneDNN takes weights with zero point 0 only");
  int64_t wmin = 0, wmax = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    wmin = std::min<int64_t>(wmin, static_cast<int64_t>(w.get(i)));
    wmax = std::max<int64_t>(wmax, static_cast<int64_t>(w.get(i)));
  }
  if (!int8_products_exact(wmin, wmax))
    return Status::unsupported(n.label() + ": weights in [" + std::to_string(wmin) + ", " + std::to_string(wmax) +
                               "] need 8 bits, and this CPU's oneDNN int8 path (" + onednn_effective_isa() +
                               ", no VNNI) sums u8 x s8 pairs in int16, which saturates; quantise with 7-bit weights "
                               "(reduce_range)");
  return Status::ok();
}

/// ONNX's QLinearConv on oneDNN's int8 convolution: uint8 or int8 input and output, int8
/// weights, an int32 bias added to the accumulator, requantised per output channel by
/// x_scale * w_scale[m] / y_scale (backends/common/quantize.hpp's multiplier) rounding half to
/// even, and the zero points as oneDNN attributes. The scales, zero points, weights and bias
/// must be constants (oneDNN's CPU int8 convolution takes them when the primitive is built).
/// Plain tensors in and out.
///
/// A 1x1 convolution with a stride above 1 runs at stride 1 over a strided view of the
/// input: oneDNN 2.6's int8 1x1 kernel (jit_uni_int8_1x1) copies the strided pixels into a
/// buffer per thread first ("reduce to unit stride"), and at 2 threads that copy races: a
/// standalone program on oneDNN alone (nothing of Mosaic) got 16 wrong outputs, off by tens
/// of codes, in 580 of 1,000 runs of a 24-to-48-channel 12x12 stride-2 layer, and 46 in 5,000
/// of ResNet's 8-to-16 shortcut beside a busy core (docs/conformance.md, "QOperator form").
/// The kernel copies every stride-th pixel to a plain buffer of the output's size first (a
/// strided view of the input is no substitute: oneDNN refuses one over an odd size).
class QLinearConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(qlinear_conv_supported(ctx));
    MOSAIC_ASSIGN_OR_RETURN(ConvParams p, quant_conv_params(ctx));
    const Node& n = *ctx.node;
    const DType xt = ctx.inputs[0].dtype, yt = ctx.outputs[0].dtype;
    const Tensor* bias = ctx.inputs.size() > 8 && ctx.inputs[8].dtype == DType::kI32 ? ctx.constant(8) : nullptr;
    const Tensor& w = *ctx.constant(3);
    const Tensor& xs = *ctx.constant(1);
    const Tensor& ws = *ctx.constant(4);
    const Tensor& ys = *ctx.constant(6);
    std::vector<float> scales(static_cast<size_t>(p.oc));
    for (int64_t m = 0; m < p.oc; ++m)
      scales[m] = static_cast<float>(qlinear_multiplier(xs.get(0), ws.get(ws.numel() == 1 ? 0 : m), ys.get(0)));
    const int32_t x_zp = static_cast<int32_t>(ctx.constant(2)->get(0)), y_zp = static_cast<int32_t>(ctx.constant(7)->get(0));
    return guarded(n, [&]() -> Status {
      const Shape& x_shape = ctx.inputs[0].shape;
      const Shape& y_shape = ctx.outputs[0].shape;
      memory::dims xd(x_shape.begin(), x_shape.end()), yd(y_shape.begin(), y_shape.end());
      // Grouped (depthwise too): the same bytes as [groups, oc / groups, ic / groups, kh, kw].
      memory::dims wd(w.shape().begin(), w.shape().end());
      if (p.group > 1) {
        wd[0] /= p.group;
        wd.insert(wd.begin(), p.group);
      }
      const tag w_tag = p.group > 1 ? tag::goihw : tag::oihw;
      memory::dims strides(p.win.stride.begin(), p.win.stride.end());
      memory::dims dil, pl(p.win.pad_begin.begin(), p.win.pad_begin.end()), pr(p.win.rank());
      for (auto d : p.win.dilation) dil.push_back(d - 1);
      for (size_t i = 0; i < p.win.rank(); ++i)
        pr[i] = (p.win.out[i] - 1) * p.win.stride[i] + (p.win.kernel[i] - 1) * p.win.dilation[i] + 1 - p.win.in[i] - pl[i];
      const dt x_dt = xt == DType::kU8 ? dt::u8 : dt::s8, y_dt = yt == DType::kU8 ? dt::u8 : dt::s8;
      // A strided 1x1 convolution runs at stride 1 over every stride-th pixel (see the class
      // comment), copied to subsampled_.
      if (strided_pointwise(p.win)) {
        in_hw_ = {xd[2], xd[3]};
        stride_ = {strides[0], strides[1]};
        xd = {xd[0], xd[1], yd[2], yd[3]};
        subsampled_ = Tensor::empty({xt, Shape(xd.begin(), xd.end())}, ctx.tracker);
        strides = {1, 1};
        pr = {0, 0};
      }
      const memory::desc x_plain(xd, x_dt, tag::nchw);
      const memory::desc b_md({p.oc}, dt::s32, tag::x);
      const memory::desc x_any(xd, x_dt, tag::any), w_any(wd, dt::s8, tag::any), y_any(yd, y_dt, tag::any);
      auto d = bias ? dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, x_any,
                                                      w_any, b_md, y_any, strides, dil, pl, pr)
                    : dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct, x_any,
                                                      w_any, y_any, strides, dil, pl, pr);
      dnnl::primitive_attr attr;
      attr.set_output_scales(1 << 1, scales);
      if (x_zp != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {x_zp});
      if (y_zp != 0) {
        // ONNX rounds before it adds y's zero point; oneDNN adds it to the scaled float and
        // rounds the sum, which moves a tie by one code where the zero point is odd (0.5 + 11
        // -> 12, ONNX's 0 + 11). Rounded first by a post-op, the sum is exact.
        dnnl::post_ops po;
        po.append_eltwise(1.f, algorithm::eltwise_round, 0.f, 0.f);
        attr.set_post_ops(po);
        attr.set_zero_points(DNNL_ARG_DST, 0, {y_zp});
      }
      dnnl::convolution_forward::primitive_desc pd(d, attr, engine());
      src_.init(x_plain, pd.src_desc(), ctx.tracker, false);
      dst_.init(memory::desc(yd, y_dt, tag::nchw), pd.dst_desc(), ctx.tracker, true);
      weights_.init(memory::desc(wd, dt::s8, w_tag), pd.weights_desc(), &w, ctx.tracker);
      if (bias) {
        bias_ = *bias;
        bias_mem_ = memory(b_md, engine(), bias_.data());
      }
      prim_ = dnnl::convolution_forward(pd);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (subsampled_.defined()) {
      subsample(*src[0]);
      src_.bind_in(&subsampled_);
    } else {
      src_.bind_in(src[0]);
    }
    dst_.bind_out(dst[0]);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_.internal}, {DNNL_ARG_WEIGHTS, weights_.get(nullptr)},
                                         {DNNL_ARG_DST, dst_.internal}};
    if (bias_.defined()) args[DNNL_ARG_BIAS] = bias_mem_;
    prim_.execute(stream(), args);
    dst_.finish_out();
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override {
    return src_.owned_bytes() + dst_.owned_bytes() + weights_.bytes() + (subsampled_.defined() ? subsampled_.bytes() : 0);
  }

 private:
  /// subsampled_[n, c, i, j] = x[n, c, i * stride_h, j * stride_w] (one-byte elements).
  void subsample(const Tensor& x) {
    const Shape& out = subsampled_.shape();
    const int64_t planes = out[0] * out[1], oh = out[2], ow = out[3], ih = in_hw_[0], iw = in_hw_[1];
    const auto* from = static_cast<const uint8_t*>(x.data());
    auto* to = static_cast<uint8_t*>(subsampled_.data());
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < oh; ++i) {
        const uint8_t* row = from + (p * ih + i * stride_[0]) * iw;
        uint8_t* o = to + (p * oh + i) * ow;
        for (int64_t j = 0; j < ow; ++j) o[j] = row[j * stride_[1]];
      }
  }

  Staged src_, dst_;
  Weights weights_;
  Tensor subsampled_;  ///< a strided 1x1 convolution's input pixels (undefined for others)
  std::array<int64_t, 2> in_hw_{}, stride_{};
  Tensor bias_;
  memory bias_mem_;
  dnnl::convolution_forward prim_;
};

}  // namespace

void add_conv_kernels(BackendRegistration& r) {
  r.kernel("QLinearConv", make_factory<QLinearConvKernel>(), {LayoutUse::kNone, qlinear_conv_supported, kAllDTypes});
  // Small maps as one dense matrix product where that applies (conv_dense.cpp), else direct.
  r.kernel("Conv",
           [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
             MOSAIC_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> dense, small_map_conv(ctx));
             if (dense) return dense;
             auto direct = std::make_unique<ConvKernel>();
             MOSAIC_RETURN_IF_ERROR(direct->init(ctx));
             // A depthwise kernel over a map no larger than itself (5x5 over 1x1) has no jit
             // implementation: oneDNN runs a GEMM per group, where the dense product is 5-10x faster.
             if (direct->per_group_gemm()) {
               MOSAIC_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> grouped, small_map_conv(ctx, true));
               if (grouped) return grouped;
             }
             return std::unique_ptr<Kernel>(std::move(direct));
           },
           {LayoutUse::kTraining, {}});
}

}  // namespace mosaic::onednn_impl
