#include "backends/onednn/onednn.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <set>
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/pooling.hpp"
#include "operators/params.hpp"

namespace mosaic {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}
dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

memory::dims to_dims(const Shape& s) { return s.empty() ? memory::dims{1} : memory::dims(s.begin(), s.end()); }

/// Plain row-major f32 descriptor.
memory::desc plain(const Shape& s) {
  memory::dims d = to_dims(s);
  memory::dims strides(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * d[i + 1];
  return memory::desc(d, dt::f32, strides);
}

memory::desc any(const Shape& s) { return memory::desc(to_dims(s), dt::f32, tag::any); }

/// A fused activation as an eltwise post-op.
dnnl::primitive_attr activation_attr(const Activation& act) {
  dnnl::primitive_attr attr;
  if (!act.active()) return attr;
  dnnl::post_ops ops;
  switch (act.kind) {
    case Activation::Kind::kRelu: ops.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f); break;
    case Activation::Kind::kLeakyRelu: ops.append_eltwise(1.f, algorithm::eltwise_relu, act.alpha, 0.f); break;
    case Activation::Kind::kClip:
      ops.append_eltwise(1.f, algorithm::eltwise_clip_v2, std::isinf(act.lo) ? -FLT_MAX : act.lo,
                         std::isinf(act.hi) ? FLT_MAX : act.hi);
      break;
    case Activation::Kind::kNone: break;
  }
  attr.set_post_ops(ops);
  return attr;
}

/// A oneDNN memory descriptor as a Mosaic layout.
class DnnlLayout final : public Layout {
 public:
  explicit DnnlLayout(memory::desc md) : md_(std::move(md)) {}
  std::string backend() const override { return "onednn"; }
  std::string name() const override {
    // e.g. "blocked:b16" for nChw16c-style channel blocking.
    const auto& blk = md_.data.format_desc.blocking;
    std::string n = "blocked";
    for (int i = 0; i < blk.inner_nblks; ++i)
      n += ":" + std::string(1, static_cast<char>('a' + blk.inner_idxs[i])) + std::to_string(blk.inner_blks[i]);
    return n;
  }
  size_t bytes() const override { return md_.get_size(); }
  bool equals(const Layout& other) const override {
    auto* o = dynamic_cast<const DnnlLayout*>(&other);
    return o && o->md_ == md_;
  }
  const memory::desc& md() const { return md_; }

 private:
  memory::desc md_;
};

/// The descriptor of input i as it arrives: its oneDNN layout, or plain.
memory::desc input_md(const KernelContext& ctx, size_t i) {
  if (auto* l = dynamic_cast<const DnnlLayout*>(ctx.input_layout(i))) return l->md();
  return plain(ctx.inputs[i].shape);
}

/// The layout to report for an output kept in `md` (nullptr when md is plain).
std::shared_ptr<const Layout> layout_of(const memory::desc& md, const Shape& shape) {
  if (md == plain(shape)) return nullptr;
  return std::make_shared<DnnlLayout>(md);
}

/// Channels per block when `md` is [N][C / L][spatial...][L] (nCw16c, nChw16c, nCdhw16c and
/// their 8- or 4-wide forms), else 0.
int channel_lanes(const memory::desc& md) {
  const auto& d = md.data;
  if (d.format_kind != dnnl_blocked || d.ndims < 3 || d.offset0 != 0) return 0;
  const auto& blk = d.format_desc.blocking;
  if (blk.inner_nblks != 1 || blk.inner_idxs[0] != 1) return 0;
  const memory::dim lanes = blk.inner_blks[0];
  memory::dim stride = lanes;
  for (int i = d.ndims - 1; i >= 2; --i) {
    if (blk.strides[i] != stride || d.padded_dims[i] != d.dims[i]) return 0;
    stride *= d.dims[i];
  }
  if (blk.strides[1] != stride) return 0;
  if (d.dims[0] > 1 && blk.strides[0] != stride * (d.padded_dims[1] / lanes)) return 0;
  return static_cast<int>(lanes);
}

/// Runs `fn` and turns a dnnl::error into a Status naming the node (onednn_error_status).
template <class F>
Status guarded(const Node& node, F&& fn) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    return onednn_error_status(static_cast<int>(e.status), e.what(), node);
  }
}

/// A memory object whose handle is rebound to a tensor at each call.
struct Bound {
  memory mem;
  void bind(const Tensor* t) { mem.set_data_handle(t->data()); }
};

/// Scratch for blocked copies that live within one kernel call (training primitives). Calls run
/// one at a time on a thread, so every kernel's copies share a few per-thread slots, each as
/// large as its largest request. Growth is counted on the tracker of the kernel that asked.
void* transient_slot(int slot, size_t bytes, MemoryTracker* tracker) {
  struct Slot {
    void* data = nullptr;
    size_t bytes = 0;
  };
  struct Slots {
    Slot slot[8];
    ~Slots() {
      for (Slot& s : slot) std::free(s.data);
    }
  };
  thread_local Slots slots;
  Slot& s = slots.slot[slot];
  if (s.bytes < bytes) {
    std::free(s.data);
    const size_t rounded = (bytes + 63) / 64 * 64;
    s.data = std::aligned_alloc(64, rounded);
    if (!s.data) throw std::bad_alloc();
    if (tracker) tracker->on_alloc(rounded - s.bytes);
    s.bytes = rounded;
  }
  return s.data;
}

/// A memory in a (possibly blocked) layout owned by the kernel, with reorders to/from plain.
class Staged {
 public:
  /// `user_md` is how the tensor is handed over (plain or a producer's layout), `want` what
  /// the primitive needs. If they are equal, no buffer or reorder is needed. With a
  /// `transient_slot` (>= 0) the blocked copy lives in that shared slot during one call only.
  void init(const memory::desc& user_md, const memory::desc& want, MemoryTracker* tracker, bool to_plain,
            int transient = -1) {
    user = memory(user_md, engine(), DNNL_MEMORY_NONE);
    needs_reorder = want != user_md;
    if (needs_reorder) {
      transient_ = transient;
      bytes = want.get_size();
      if (transient_ >= 0) {
        internal = memory(want, engine(), DNNL_MEMORY_NONE);
      } else {
        internal = memory(want, engine());
        if (tracker) tracker->on_alloc(bytes);
        tracker_ = tracker;
      }
      scratch_tracker_ = tracker;
      reorder = to_plain ? dnnl::reorder(internal, user) : dnnl::reorder(user, internal);
      to_plain_ = to_plain;
    } else {
      internal = user;
    }
  }
  ~Staged() {
    if (tracker_) tracker_->on_free(bytes);
  }
  /// Bytes the kernel holds for the copy (0 when none or transient).
  size_t owned_bytes() const { return needs_reorder && transient_ < 0 ? bytes : 0; }
  /// Binds the user tensor; for inputs, reorders it into the internal layout.
  void bind_in(const Tensor* t) {
    user.set_data_handle(t->data());
    if (!needs_reorder) return;
    attach();
    reorder.execute(stream(), user, internal);
  }
  void bind_out(Tensor* t) {
    user.set_data_handle(t->data());
    if (needs_reorder) attach();
  }
  void finish_out() {
    if (needs_reorder) reorder.execute(stream(), internal, user);
  }
  memory user, internal;
  dnnl::reorder reorder;
  bool needs_reorder = false;
  size_t bytes = 0;

 private:
  void attach() {
    if (transient_ >= 0) internal.set_data_handle(transient_slot(transient_, bytes, scratch_tracker_));
  }
  MemoryTracker* tracker_ = nullptr;
  MemoryTracker* scratch_tracker_ = nullptr;
  bool to_plain_ = false;
  int transient_ = -1;
};

/// Weights reordered once at create time when constant, else at every call.
class Weights {
 public:
  void init(const memory::desc& plain_md, const memory::desc& want, const Tensor* constant, MemoryTracker* tracker) {
    staged_.init(plain_md, want, tracker, false);
    constant_ = constant != nullptr;
    if (constant_) staged_.bind_in(constant);
    if (constant_) stream().wait();
  }
  memory& get(const Tensor* t) {
    if (!constant_) staged_.bind_in(t);
    return staged_.internal;
  }
  size_t bytes() const { return staged_.owned_bytes(); }

 private:
  Staged staged_;
  bool constant_ = false;
};

/// A kernel running one primitive from src to dst, both bound per call (softmax, LRN,
/// reorders). DNNL_ARG_FROM/TO are the same argument ids as SRC/DST.
class SrcDstPrimitive : public Kernel {
 public:
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    src_.bind(src[0]);
    dst_.bind(dst[0]);
    prim_.execute(stream(), {{DNNL_ARG_SRC, src_.mem}, {DNNL_ARG_DST, dst_.mem}});
    stream().wait();
    return Status::ok();
  }

 protected:
  void set(dnnl::primitive prim, const memory::desc& src, const memory::desc& dst) {
    prim_ = std::move(prim);
    src_.mem = memory(src, engine(), DNNL_MEMORY_NONE);
    dst_.mem = memory(dst, engine(), DNNL_MEMORY_NONE);
  }
  Bound src_, dst_;
  dnnl::primitive prim_;
};

// ---- Conv -----------------------------------------------------------------------------------

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
      auto d = has_bias_ ? dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                                           any(xs), any(ws), plain({p.oc}), any(ys), strides, dil, pl, pr)
                         : dnnl::convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                                           any(xs), any(ws), any(ys), strides, dil, pl, pr);
      dnnl::convolution_forward::primitive_desc pd(d, activation_attr(fused_activation(*ctx.node)), engine());
      src_.init(input_md(ctx, 0), pd.src_desc(), ctx.tracker, false);
      // Keep oneDNN's output layout when every consumer can read it; else reorder to plain.
      const memory::desc out_md = ctx.layout_free(0) ? pd.dst_desc() : plain(ys);
      dst_.init(out_md, pd.dst_desc(), ctx.tracker, true);
      out_layout_ = layout_of(out_md, ys);
      weights_.init(plain(ws), pd.weights_desc(), ctx.constant(1), ctx.tracker);
      if (has_bias_) bias_.mem = memory(plain({p.oc}), engine(), DNNL_MEMORY_NONE);
      prim_ = dnnl::convolution_forward(pd);
      return Status::ok();
    });
  }
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
    auto fd = has_bias_ ? dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                                          any(xs), any(ws), b_md, any(ys), strides, dil, pl, pr)
                        : dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                                          any(xs), any(ws), any(ys), strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc fpd(fd, engine());
    dnnl::convolution_backward_data::desc bdd(algorithm::convolution_direct, any(xs), any(ws), any(ys), strides, dil,
                                              pl, pr);
    dnnl::convolution_backward_data::primitive_desc bdpd(bdd, engine(), fpd);
    auto bwd = has_bias_ ? dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any(xs), any(ws),
                                                                    b_md, any(ys), strides, dil, pl, pr)
                         : dnnl::convolution_backward_weights::desc(algorithm::convolution_direct, any(xs), any(ws),
                                                                    any(ys), strides, dil, pl, pr);
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
};

// ---- Pooling --------------------------------------------------------------------------------

class PoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.has_output(1)) return Status::unsupported(ctx.node->label() + ": MaxPool Indices output (naive only)");
    MOSAIC_ASSIGN_OR_RETURN(PoolParams p, pool_params(ctx));
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
      // Pool in the input's layout; the output follows it (reordered to plain if needed).
      const memory::desc src = input_md(ctx, 0);
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
    if (trainable_ && !max_backward_) {
      t_src_.bind(src[0]);
      t_dst_.bind(dst[0]);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, t_src_.mem}, {DNNL_ARG_DST, t_dst_.mem}};
      if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
      train_fwd_.execute(stream(), args);
      stream().wait();
      return Status::ok();
    }
    src_.bind(src[0]);
    dst_.bind_out(dst[0]);
    prim_.execute(stream(), {{DNNL_ARG_SRC, src_.mem}, {DNNL_ARG_DST, dst_.internal}});
    dst_.finish_out();
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override { return dst_.bytes + (workspace_ ? workspace_.get_desc().get_size() : 0); }
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
  Bound src_;
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

// ---- Gemm / MatMul via the matmul primitive ---------------------------------------------------

/// dst = alpha * A x B (+ bias), A and B possibly transposed (via strides) and batched.
class MatMulBase : public Kernel {
 protected:
  Status build(const KernelContext& ctx, const memory::desc& a, const memory::desc& b, const memory::desc* bias,
               const memory::desc& y, float alpha, const Tensor* b_const) {
    return guarded(*ctx.node, [&]() -> Status {
      memory::desc b_want = b_const ? memory::desc(b.dims(), dt::f32, tag::any) : b;
      auto d = bias ? dnnl::matmul::desc(a, b_want, *bias, y) : dnnl::matmul::desc(a, b_want, y);
      dnnl::primitive_attr attr = activation_attr(fused_activation(*ctx.node));
      if (alpha != 1.f) attr.set_output_scales(0, {alpha});
      dnnl::matmul::primitive_desc pd(d, attr, engine());
      a_.mem = memory(a, engine(), DNNL_MEMORY_NONE);
      y_.mem = memory(y, engine(), DNNL_MEMORY_NONE);
      if (bias) bias_.mem = memory(*bias, engine(), DNNL_MEMORY_NONE);
      weights_.init(b, pd.weights_desc(), b_const, ctx.tracker);
      prim_ = dnnl::matmul(pd);
      return Status::ok();
    });
  }
  void run(const Tensor* a, const Tensor* b, const void* bias, Tensor* y) {
    a_.bind(a);
    y_.bind(y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_.mem}, {DNNL_ARG_WEIGHTS, weights_.get(b)}, {DNNL_ARG_DST, y_.mem}};
    if (bias) {
      bias_.mem.set_data_handle(const_cast<void*>(bias));
      args[DNNL_ARG_BIAS] = bias_.mem;
    }
    prim_.execute(stream(), args);
    stream().wait();
  }
  size_t workspace_bytes() const override { return weights_.bytes(); }

 private:
  Bound a_, y_, bias_;
  Weights weights_;
  dnnl::matmul prim_;
};

class GemmKernel final : public MatMulBase {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    const memory::desc a = p_.trans_a ? memory::desc({p_.m, p_.k}, dt::f32, {1, p_.m}) : plain({p_.m, p_.k});
    const memory::desc b = p_.trans_b ? memory::desc({p_.k, p_.n}, dt::f32, {1, p_.k}) : plain({p_.k, p_.n});
    const memory::desc y = plain({p_.m, p_.n});
    memory::desc bias_md;
    if (p_.has_c && p_.beta != 0.f) {
      Shape c = ctx.inputs[2].shape;
      while (c.size() < 2) c.insert(c.begin(), 1);
      bias_md = plain(c);
      c_elems_ = shape_numel(c);
      // oneDNN scales (A x B + bias) by alpha, so the bias is C * beta / alpha.
      if (p_.alpha == 0.f) return Status::unsupported(ctx.node->label() + ": alpha = 0");
      c_scale_ = p_.beta / p_.alpha;
      if (c_scale_ != 1.f) scaled_c_.resize(static_cast<size_t>(c_elems_));
      c_shape_ = ctx.inputs[2].shape;
    }
    MOSAIC_RETURN_IF_ERROR(build(ctx, a, b, c_elems_ ? &bias_md : nullptr, y, p_.alpha, ctx.constant(1)));
    if (ctx.training && !fused_activation(*ctx.node).active()) return build_backward(ctx);
    return Status::ok();
  }

  bool has_backward() const override { return trainable_; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = alpha dY op(B)^T and dB = alpha op(A)^T dY as matmuls whose transposes are strides;
  /// dC = beta dY summed over C's broadcast axes.
  Status backward(const BackwardArgs& a) override {
    if (a.diff_src[0]) {
      da_args_[0].mem.set_data_handle(const_cast<void*>(p_.trans_a ? a.src[1]->data() : a.diff_dst[0]->data()));
      da_args_[1].mem.set_data_handle(const_cast<void*>(p_.trans_a ? a.diff_dst[0]->data() : a.src[1]->data()));
      da_args_[2].bind(a.diff_src[0]);
      da_.execute(stream(), {{DNNL_ARG_SRC, da_args_[0].mem}, {DNNL_ARG_WEIGHTS, da_args_[1].mem},
                             {DNNL_ARG_DST, da_args_[2].mem}});
    }
    if (a.diff_src[1]) {
      db_args_[0].mem.set_data_handle(const_cast<void*>(p_.trans_b ? a.diff_dst[0]->data() : a.src[0]->data()));
      db_args_[1].mem.set_data_handle(const_cast<void*>(p_.trans_b ? a.src[0]->data() : a.diff_dst[0]->data()));
      db_args_[2].bind(a.diff_src[1]);
      db_.execute(stream(), {{DNNL_ARG_SRC, db_args_[0].mem}, {DNNL_ARG_WEIGHTS, db_args_[1].mem},
                             {DNNL_ARG_DST, db_args_[2].mem}});
    }
    stream().wait();
    if (a.diff_src.size() > 2 && a.diff_src[2]) {
      const float* dy = a.diff_dst[0]->f32();
      float* dc = a.diff_src[2]->f32();
      std::fill(dc, dc + a.diff_src[2]->numel(), 0.f);
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) dc[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] += p_.beta * dy[i * p_.n + j];
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const void* bias = nullptr;
    if (c_elems_) {
      bias = src[2]->data();
      if (!scaled_c_.empty()) {
        for (int64_t i = 0; i < c_elems_; ++i) scaled_c_[i] = c_scale_ * src[2]->f32()[i];
        bias = scaled_c_.data();
      }
    }
    run(src[0], src[1], bias, dst[0]);
    return Status::ok();
  }

 private:
  Status build_backward(const KernelContext& ctx) {
    return guarded(*ctx.node, [&]() -> Status {
      const int64_t M = p_.m, N = p_.n, K = p_.k;
      // A matrix of the given shape stored row-major, or the transpose of such a matrix.
      auto rm = [](int64_t r, int64_t c) { return memory::desc({r, c}, dt::f32, {c, 1}); };
      auto tr = [](int64_t r, int64_t c) { return memory::desc({r, c}, dt::f32, {1, r}); };
      dnnl::primitive_attr attr;
      if (p_.alpha != 1.f) attr.set_output_scales(0, {p_.alpha});
      auto make = [&](const memory::desc& s, const memory::desc& w, const memory::desc& d, dnnl::matmul& prim,
                      Bound* args) {
        prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(s, w, d), attr, engine()));
        args[0].mem = memory(s, engine(), DNNL_MEMORY_NONE);
        args[1].mem = memory(w, engine(), DNNL_MEMORY_NONE);
        args[2].mem = memory(d, engine(), DNNL_MEMORY_NONE);
      };
      // op(B) as [K, N] and its transpose [N, K], from B's storage; likewise op(A).
      const memory::desc opb_t = p_.trans_b ? rm(N, K) : tr(N, K);
      const memory::desc opb = p_.trans_b ? tr(K, N) : rm(K, N);
      const memory::desc opa_t = p_.trans_a ? rm(K, M) : tr(K, M);
      const memory::desc opa = p_.trans_a ? tr(M, K) : rm(M, K);
      if (!p_.trans_a) make(rm(M, N), opb_t, rm(M, K), da_, da_args_);  // dA = dY op(B)^T
      else make(opb, tr(N, M), rm(K, M), da_, da_args_);                // dA stored [K, M]: op(B) dY^T
      if (!p_.trans_b) make(opa_t, rm(M, N), rm(K, N), db_, db_args_);  // dB = op(A)^T dY
      else make(tr(N, M), opa, rm(N, K), db_, db_args_);                // dB stored [N, K]: dY^T op(A)
      trainable_ = true;
      return Status::ok();
    });
  }

  GemmParams p_;
  int64_t c_elems_ = 0;
  float c_scale_ = 1.f;
  std::vector<float> scaled_c_;
  Shape c_shape_;
  bool trainable_ = false;
  dnnl::matmul da_, db_;
  Bound da_args_[3], db_args_[3];
};

class MatMulKernel final : public MatMulBase {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return p.status().with_context(ctx.node->label());
    Shape a = p->a_batch, b = p->b_batch, y = p->batch;
    a.insert(a.end(), {p->m, p->k});
    b.insert(b.end(), {p->k, p->n});
    y.insert(y.end(), {p->m, p->n});
    if (a.size() > 12) return Status::unsupported(ctx.node->label() + ": rank above 12");
    p_ = p.value();
    return build(ctx, plain(a), plain(b), nullptr, plain(y), 1.f, ctx.constant(1));
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    run(src[0], src[1], nullptr, dst[0]);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = dY B^T, dB = A^T dY per batch with oneDNN's sgemm, summed over broadcasts.
  Status backward(const BackwardArgs& a) override {
    matmul_backward(p_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                    a.diff_src[0] ? a.diff_src[0]->f32() : nullptr, a.diff_src[1] ? a.diff_src[1]->f32() : nullptr,
                    [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                       int64_t ldb, float beta, float* C, int64_t ldc) {
                      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, A, lda, B, ldb, beta, C, ldc);
                    });
    return Status::ok();
  }

 private:
  MatMulParams p_;
};

// ---- Element-wise, binary -------------------------------------------------------------------

class EltwiseKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const std::string& op = ctx.node->op_type;
    op_ = op;
    algorithm alg = algorithm::eltwise_relu;
    float alpha = 0.f, beta = 0.f;
    if (op == "LeakyRelu") alpha = ctx.node->attr_float("alpha", 0.01f);
    else if (op == "Sigmoid") alg = algorithm::eltwise_logistic;
    else if (op == "Tanh") alg = algorithm::eltwise_tanh;
    else if (op == "Clip") {
      if ((ctx.has_input(1) && !ctx.constant(1)) || (ctx.has_input(2) && !ctx.constant(2)))
        return Status::unsupported(ctx.node->label() + ": Clip bounds computed at run time");
      ClipParams c = clip_attr_params(ctx);
      alg = algorithm::eltwise_clip_v2;
      alpha = std::isinf(c.lo) ? -FLT_MAX : c.lo;
      beta = std::isinf(c.hi) ? FLT_MAX : c.hi;
    }
    return guarded(*ctx.node, [&]() -> Status {
      // Element-wise in the input's layout; the output is reordered to plain if it must be.
      const memory::desc md = input_md(ctx, 0);
      const Shape& ys = ctx.outputs[0].shape;
      dnnl::eltwise_forward::desc d(prop_kind::forward_inference, alg, md, alpha, beta);
      prim_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, engine()));
      const memory::desc out_md = ctx.layout_free(0) ? md : plain(ys);
      if (ctx.training) {
        // Relu, Sigmoid and Tanh differentiate from their output (oneDNN's use_dst_for_bwd
        // variants), so the plan need not keep their input.
        algorithm balg = alg;
        if (unary_backward_reads_output(op))
          balg = op == "Relu"      ? algorithm::eltwise_relu_use_dst_for_bwd
                 : op == "Sigmoid" ? algorithm::eltwise_logistic_use_dst_for_bwd
                                   : algorithm::eltwise_tanh_use_dst_for_bwd;
        dnnl::eltwise_forward::primitive_desc hint(
            dnnl::eltwise_forward::desc(prop_kind::forward_training, balg, md, alpha, beta), engine());
        dnnl::eltwise_backward::desc bd(balg, md, md, alpha, beta);
        bwd_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, engine(), hint));
        // Backward runs in the input's layout, where dx is written. The output and its
        // gradient are plain if the input is in a layout its consumers cannot read: they are
        // reordered in through transient slots.
        const bool from_dst = unary_backward_reads_output(op);
        b_data_.init(from_dst ? out_md : md, md, ctx.tracker, false, 0);
        b_diff_dst_.init(out_md, md, ctx.tracker, false, 1);
        b_diff_src_.mem = memory(md, engine(), DNNL_MEMORY_NONE);
        trainable_ = true;
      }
      src_.mem = memory(md, engine(), DNNL_MEMORY_NONE);
      dst_.init(out_md, md, ctx.tracker, true);
      out_layout_ = layout_of(out_md, ys);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    src_.bind(src[0]);
    dst_.bind_out(dst[0]);
    prim_.execute(stream(), {{DNNL_ARG_SRC, src_.mem}, {DNNL_ARG_DST, dst_.internal}});
    dst_.finish_out();
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override { return dst_.bytes; }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }
  bool has_backward() const override { return trainable_; }
  bool backward_reads_input(size_t i) const override { return i > 0 || unary_backward_reads_input(op_); }
  bool backward_reads_output(size_t) const override { return unary_backward_reads_output(op_); }
  Status backward(const BackwardArgs& a) override {
    for (size_t i = 1; i < a.diff_src.size(); ++i)
      if (a.diff_src[i]) std::fill(a.diff_src[i]->f32(), a.diff_src[i]->f32() + a.diff_src[i]->numel(), 0.f);
    if (!a.diff_src[0]) return Status::ok();
    const bool from_dst = unary_backward_reads_output(op_);
    b_data_.bind_in(from_dst ? a.dst[0] : a.src[0]);
    b_diff_dst_.bind_in(a.diff_dst[0]);
    b_diff_src_.bind(a.diff_src[0]);
    bwd_.execute(stream(), {{from_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, b_data_.internal},
                            {DNNL_ARG_DIFF_DST, b_diff_dst_.internal}, {DNNL_ARG_DIFF_SRC, b_diff_src_.mem}});
    stream().wait();
    return Status::ok();
  }

 private:
  Bound src_;
  Staged dst_;
  std::shared_ptr<const Layout> out_layout_;
  dnnl::eltwise_forward prim_;
  bool trainable_ = false;
  std::string op_;
  dnnl::eltwise_backward bwd_;
  Staged b_data_, b_diff_dst_;
  Bound b_diff_src_;
};

class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.outputs[0].dtype != DType::kF32)
      return Status::unsupported(ctx.node->label() + ": oneDNN backend computes float32 only");
    const std::string& op = ctx.node->op_type;
    const algorithm alg = op == "Add" ? algorithm::binary_add
                          : op == "Sub" ? algorithm::binary_sub
                          : op == "Mul" ? algorithm::binary_mul
                                        : algorithm::binary_div;
    const Shape& out = ctx.outputs[0].shape;
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    out_shape_ = out;
    op_ = binary_op_of(op);
    Shape a = ctx.inputs[0].shape, b = ctx.inputs[1].shape;
    a.insert(a.begin(), out.size() - a.size(), 1);
    b.insert(b.begin(), out.size() - b.size(), 1);
    // oneDNN broadcasts src1 only; commutative ops may swap operands.
    if (a != out) {
      if (b == out && (op == "Add" || op == "Mul")) {
        std::swap(a, b);
        swapped_ = true;
      } else {
        return Status::unsupported(ctx.node->label() + ": oneDNN binary broadcasts only its second operand");
      }
    }
    return guarded(*ctx.node, [&]() -> Status {
      // Operands in oneDNN layouts are used as they are when both share one (same shape, as
      // in a residual Add); otherwise they are reordered to plain first.
      const size_t ia = swapped_ ? 1 : 0, ib = swapped_ ? 0 : 1;
      // Plain operands are viewed at the output's rank (broadcast shapes padded with 1s).
      memory::desc ma = ctx.input_layout(ia) ? input_md(ctx, ia) : plain(a);
      memory::desc mb = ctx.input_layout(ib) ? input_md(ctx, ib) : plain(b);
      memory::desc compute_a = plain(a), compute_b = plain(b);
      if (ma == mb && a == b) compute_a = compute_b = ma;
      a_.init(ma, compute_a, ctx.tracker, false);
      b_.init(mb, compute_b, ctx.tracker, false);
      dnnl::binary::desc d(alg, compute_a, compute_b, any(out));
      dnnl::binary::primitive_desc pd(d, engine());
      const memory::desc out_md = ctx.layout_free(0) ? pd.dst_desc() : plain(out);
      y_.init(out_md, pd.dst_desc(), ctx.tracker, true);
      out_layout_ = layout_of(out_md, out);
      prim_ = dnnl::binary(pd);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    a_.bind_in(src[swapped_ ? 1 : 0]);
    b_.bind_in(src[swapped_ ? 0 : 1]);
    y_.bind_out(dst[0]);
    prim_.execute(stream(), {{DNNL_ARG_SRC_0, a_.internal}, {DNNL_ARG_SRC_1, b_.internal}, {DNNL_ARG_DST, y_.internal}});
    y_.finish_out();
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override { return a_.bytes + b_.bytes + y_.bytes; }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return binary_backward_reads_inputs(op_); }
  bool backward_reads_output(size_t) const override { return false; }
  /// oneDNN has no binary backward: the shared broadcast reduction (common/grad.hpp).
  Status backward(const BackwardArgs& a) override {
    binary_backward(op_, a_shape_, b_shape_, out_shape_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                    a.diff_src[0] ? a.diff_src[0]->f32() : nullptr, a.diff_src[1] ? a.diff_src[1]->f32() : nullptr);
    return Status::ok();
  }

 private:
  Shape a_shape_, b_shape_, out_shape_;
  BinaryOp op_ = BinaryOp::kAdd;
  Staged a_, b_, y_;
  std::shared_ptr<const Layout> out_layout_;
  bool swapped_ = false;
  dnnl::binary prim_;
};

// ---- Softmax, BatchNorm, LRN ----------------------------------------------------------------

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
    c_ = x[1];
    m_ = shape_numel(x) / std::max<int64_t>(c_, 1);
    training_ = ctx.training;
    momentum_ = ctx.node->attr_float("momentum", 0.9f);
    if (training_ && ctx.input_layout(0))
      return Status::unsupported(ctx.node->label() + ": training on a blocked input layout");
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc md = input_md(ctx, 0);
      const float eps = ctx.node->attr_float("epsilon", 1e-5f);
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
    if (a.diff_src[0]) {
      b_diff_src_.bind(a.diff_src[0]);
    } else {
      scratch.resize(static_cast<size_t>(m_ * c_));
      b_diff_src_.mem.set_data_handle(scratch.data());
    }
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
    const float* ds = static_cast<const float*>(diff_scale_.get_data_handle());
    const float* db = static_cast<const float*>(diff_shift_.get_data_handle());
    if (a.diff_src.size() > 1 && a.diff_src[1]) std::copy(ds, ds + c_, a.diff_src[1]->f32());
    if (a.diff_src.size() > 2 && a.diff_src[2]) std::copy(db, db + c_, a.diff_src[2]->f32());
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

// ---- Data movement: concat, transpose (reorder), constant pad (reorder into a sub-memory) ----

class ConcatKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.outputs[0].dtype != DType::kF32) return Status::unsupported(ctx.node->label() + ": non-float concat");
    const int64_t r = static_cast<int64_t>(ctx.outputs[0].shape.size());
    MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0), r, *ctx.node));
    return guarded(*ctx.node, [&]() -> Status {
      std::vector<memory::desc> mds;
      for (const auto& in : ctx.inputs) {
        if (in.numel() == 0) return Status::unsupported(ctx.node->label() + ": empty input");
        mds.push_back(plain(in.shape));
      }
      const memory::desc out = plain(ctx.outputs[0].shape);
      dnnl::concat::primitive_desc pd(out, static_cast<int>(axis), mds, engine());
      prim_ = dnnl::concat(pd);
      for (auto& md : mds) srcs_.push_back({memory(md, engine(), DNNL_MEMORY_NONE)});
      dst_.mem = memory(out, engine(), DNNL_MEMORY_NONE);
      if (ctx.training) {
        // Backward: input i's gradient is its slab of dy, copied out by a reorder.
        memory::dims offsets(out.dims().size(), 0);
        for (auto& md : mds) {
          const memory::desc slab = out.submemory_desc(md.dims(), offsets);
          back_.push_back(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), slab, engine(), md)));
          back_from_.push_back({memory(slab, engine(), DNNL_MEMORY_NONE)});
          back_to_.push_back({memory(md, engine(), DNNL_MEMORY_NONE)});
          offsets[static_cast<size_t>(axis)] += md.dims()[static_cast<size_t>(axis)];
        }
      }
      return Status::ok();
    });
  }
  bool has_backward() const override { return !back_.empty(); }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    for (size_t i = 0; i < back_.size(); ++i) {
      if (!a.diff_src[i]) continue;
      back_from_[i].bind(a.diff_dst[0]);
      back_to_[i].bind(a.diff_src[i]);
      back_[i].execute(stream(), {{DNNL_ARG_FROM, back_from_[i].mem}, {DNNL_ARG_TO, back_to_[i].mem}});
    }
    stream().wait();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    std::unordered_map<int, memory> args;
    for (size_t i = 0; i < srcs_.size(); ++i) {
      srcs_[i].bind(src[i]);
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = srcs_[i].mem;
    }
    dst_.bind(dst[0]);
    args[DNNL_ARG_DST] = dst_.mem;
    prim_.execute(stream(), args);
    stream().wait();
    return Status::ok();
  }

 private:
  std::vector<Bound> srcs_;
  Bound dst_;
  dnnl::concat prim_;
  std::vector<dnnl::reorder> back_;
  std::vector<Bound> back_from_, back_to_;
};

class ReorderKernel : public SrcDstPrimitive {
 public:
  bool has_backward() const override { return static_cast<bool>(back_); }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  /// The backward is one reorder from dy (`back_from_`) into dx (`back_to_`).
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    for (size_t i = 1; i < a.diff_src.size(); ++i)
      if (a.diff_src[i]) std::memset(a.diff_src[i]->data(), 0, a.diff_src[i]->bytes());
    back_from_.bind(a.diff_dst[0]);
    back_to_.bind(a.diff_src[0]);
    back_.execute(stream(), {{DNNL_ARG_FROM, back_from_.mem}, {DNNL_ARG_TO, back_to_.mem}});
    stream().wait();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (fill_) {
      float* y = dst[0]->f32();
      std::fill(y, y + out_bytes_ / sizeof(float), value_);
    }
    return SrcDstPrimitive::forward(src, dst);
  }

 protected:
  void set_backward(const memory::desc& from, const memory::desc& to) {
    back_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
    back_from_.mem = memory(from, engine(), DNNL_MEMORY_NONE);
    back_to_.mem = memory(to, engine(), DNNL_MEMORY_NONE);
  }
  bool fill_ = false;
  float value_ = 0.f;
  size_t out_bytes_ = 0;  ///< bytes of the output in its layout (blocked may pad channels)
  dnnl::reorder back_;
  Bound back_from_, back_to_;
};

/// Transpose as a reorder from the input viewed with permuted strides.
class TransposeKernel final : public ReorderKernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.inputs[0].dtype != DType::kF32) return Status::unsupported(ctx.node->label() + ": non-float transpose");
    MOSAIC_ASSIGN_OR_RETURN(auto perm, transpose_perm(ctx));
    if (perm.empty()) return Status::unsupported(ctx.node->label() + ": rank-0 transpose");
    return guarded(*ctx.node, [&]() -> Status {
      const auto in_strides = row_major_strides(ctx.inputs[0].shape);
      memory::dims strides;
      for (auto p : perm) strides.push_back(in_strides[p]);
      const memory::desc from(to_dims(ctx.outputs[0].shape), dt::f32, strides), to = plain(ctx.outputs[0].shape);
      set(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to)), from, to);
      // Backward: dy (plain, output order) written into dx through the same permuted view.
      if (ctx.training) set_backward(to, from);
      return Status::ok();
    });
  }
};

/// The same layout as `md` for other dims, when `md` is plain or channel-blocked (the
/// layouts oneDNN's convolutions produce); empty otherwise.
std::optional<memory::desc> same_layout(const memory::desc& md, const memory::dims& dims) {
  const auto& blk = md.data.format_desc.blocking;
  if (md.data.format_kind != dnnl_blocked) return std::nullopt;
  if (blk.inner_nblks == 0) {
    // Plain strides in some axis order: keep the order.
    std::vector<int> order(md.data.ndims);
    for (int i = 0; i < md.data.ndims; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return blk.strides[a] > blk.strides[b]; });
    memory::dims strides(dims.size());
    memory::dim stride = 1;
    for (int i = md.data.ndims - 1; i >= 0; --i) {
      strides[order[i]] = stride;
      stride *= dims[order[i]];
    }
    return memory::desc(dims, dt::f32, strides);
  }
  if (blk.inner_nblks != 1 || blk.inner_idxs[0] != 1 || md.data.ndims != 4) return std::nullopt;
  switch (blk.inner_blks[0]) {
    case 16: return memory::desc(dims, dt::f32, tag::nChw16c);
    case 8: return memory::desc(dims, dt::f32, tag::nChw8c);
    case 4: return memory::desc(dims, dt::f32, tag::nChw4c);
    default: return std::nullopt;
  }
}

/// Constant Pad: fill the output, then reorder the input into the interior sub-memory.
/// Works in the input's layout when it is channel-blocked and only spatial axes are padded.
class PadKernel final : public ReorderKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(PadParams p, pad_params(ctx));
    if (p.mode != "constant") return Status::unsupported(ctx.node->label() + ": oneDNN has no " + p.mode + " padding");
    if (p.value_at_run_time) return Status::unsupported(ctx.node->label() + ": pad value computed at run time");
    if (ctx.inputs[0].dtype != DType::kF32) return Status::unsupported(ctx.node->label() + ": non-float pad");
    const size_t r = ctx.inputs[0].shape.size();
    for (auto v : p.pads)
      if (v < 0) return Status::unsupported(ctx.node->label() + ": negative pads (cropping)");
    if (ctx.inputs[0].numel() == 0 || r == 0) return Status::unsupported(ctx.node->label() + ": empty input");
    fill_ = true;
    value_ = p.value;
    return guarded(*ctx.node, [&]() -> Status {
      memory::desc in = input_md(ctx, 0);
      const memory::desc in_layout = in;
      memory::desc out = plain(ctx.outputs[0].shape);
      const bool channel_padded = r > 1 && (p.pads[1] != 0 || p.pads[1 + r] != 0);
      if (ctx.input_layout(0) && !channel_padded) {
        if (auto same = same_layout(in, to_dims(ctx.outputs[0].shape))) out = *same;
      }
      if (ctx.input_layout(0) && out == plain(ctx.outputs[0].shape)) {
        // Cannot pad in this layout: read the input through a plain staging copy.
        staged_in_.init(in, plain(ctx.inputs[0].shape), ctx.tracker, false);
        in = plain(ctx.inputs[0].shape);
        staged_ = true;
      }
      if (!ctx.layout_free(0) && out != plain(ctx.outputs[0].shape)) out = plain(ctx.outputs[0].shape);
      out_layout_ = layout_of(out, ctx.outputs[0].shape);
      out_bytes_ = out.get_size();
      memory::dims offsets(p.pads.begin(), p.pads.begin() + static_cast<long>(r));
      const memory::desc interior = out.submemory_desc(to_dims(ctx.inputs[0].shape), offsets);
      set(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), in, engine(), interior)), in, interior);
      // Backward of constant padding: dx (in the input's layout) is dy's interior, cropped
      // out by a reorder.
      if (ctx.training) set_backward(interior, in_layout);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (!staged_) return ReorderKernel::forward(src, dst);
    staged_in_.bind_in(src[0]);
    float* y = dst[0]->f32();
    std::fill(y, y + out_bytes_ / sizeof(float), value_);
    src_.mem.set_data_handle(staged_in_.internal.get_data_handle());
    dst_.bind(dst[0]);
    prim_.execute(stream(), {{DNNL_ARG_FROM, src_.mem}, {DNNL_ARG_TO, dst_.mem}});
    stream().wait();
    return Status::ok();
  }
  std::shared_ptr<const Layout> output_layout(size_t) const override { return out_layout_; }
  size_t workspace_bytes() const override { return staged_in_.bytes; }

 private:
  Staged staged_in_;
  bool staged_ = false;
  std::shared_ptr<const Layout> out_layout_;
};

/// The planner's conversion step: a oneDNN layout to plain row-major. In training its
/// backward converts the plain gradient back into the layout.
class ToPlainKernel final : public ReorderKernel {
 public:
  Status init(const KernelContext& ctx) {
    auto* l = dynamic_cast<const DnnlLayout*>(ctx.input_layout(0));
    if (!l) return Status::internal(ctx.node->label() + ": input is not in a oneDNN layout");
    return guarded(*ctx.node, [&]() -> Status {
      const memory::desc to = plain(ctx.outputs[0].shape);
      set(dnnl::reorder(dnnl::reorder::primitive_desc(engine(), l->md(), engine(), to)), l->md(), to);
      if (ctx.training) set_backward(to, l->md());
      return Status::ok();
    });
  }
};

}  // namespace

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (commit " +
         v->hash + ")";
}

bool onednn_sgemm(int n, const float* a, const float* b, float* c) {
  return dnnl_sgemm('N', 'N', n, n, n, 1.f, a, n, b, n, 0.f, c, n) == dnnl_success;
}

std::string onednn_effective_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

Status onednn_error_status(int status, const std::string& what, const Node& node) {
  const std::string msg = node.label() + ": oneDNN: " + what;
  if (status == dnnl_unimplemented) return Status::unsupported(msg + " (no implementation for this configuration)");
  const char* name = status == dnnl_out_of_memory       ? "out of memory"
                     : status == dnnl_invalid_arguments ? "invalid arguments"
                     : status == dnnl_runtime_error     ? "runtime error"
                                                        : "error";
  return Status::internal(msg + " (" + name + ", status " + std::to_string(status) + ")");
}

/// oneDNN's version (the instruction set its JIT uses here is onednn_effective_isa()).
std::vector<std::pair<std::string, std::string>> onednn_details() { return {{"oneDNN", onednn_version()}}; }

Status register_onednn_kernels(KernelRegistry& registry) {
  BackendRegistration r(registry, {"onednn", "oneDNN primitives, in its blocked layouts along chains of layout-aware ops", onednn_details});
  r.kernel("Conv", make_factory<ConvKernel>());
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
    r.kernel(op, make_factory<PoolKernel>());
  r.kernel("Gemm", make_factory<GemmKernel>());
  r.kernel("MatMul", make_factory<MatMulKernel>());
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) r.kernel(op, make_factory<BinaryKernel>());
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip"}) r.kernel(op, make_factory<EltwiseKernel>());
  r.kernel("Softmax", make_factory<SoftmaxKernel>());
  r.kernel("LogSoftmax", make_factory<SoftmaxKernel>());
  r.kernel("BatchNormalization", make_factory<BatchNormKernel>());
  r.kernel("LRN", make_factory<LrnKernel>());
  r.kernel("Concat", make_factory<ConcatKernel>());
  r.kernel("Transpose", make_factory<TransposeKernel>());
  r.kernel("Pad", make_factory<PadKernel>());
  register_view_kernels(r);
  // Ops whose kernels read and write oneDNN's blocked layouts, so chains of them skip the
  // reorders to and from plain.
  r.kernel(kToPlainOp, make_factory<ToPlainKernel>());
  // Training kernels (forward and backward) in blocked layouts: the chains of a CNN.
  const std::set<std::string> in_training = {"Conv", "MaxPool", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "Pad"};
  for (const char* op : {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Relu", "LeakyRelu",
                         "Sigmoid", "Tanh", "Clip", "BatchNormalization", "Add", "Sub", "Mul", "Div", "Pad"})
    r.layouts(op, in_training.count(op) != 0);
  return r.status();
}

}  // namespace mosaic
