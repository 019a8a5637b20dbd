// Internal to the oneDNN backend: what its kernel families share (the engine and stream,
// descriptors, the layout type it keeps, staged copies into blocked layouts, error
// handling), and the registration function of each family. Not a public header.
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/onednn/onednn.hpp"
#include "core/registration.hpp"
#include "operators/params.hpp"

namespace mosaic::onednn_impl {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

/// The CPU engine and the stream every kernel runs on (one each per process).
dnnl::engine& engine();
dnnl::stream& stream();

memory::dims to_dims(const Shape& s);
/// Plain row-major f32 descriptor.
memory::desc plain(const Shape& s);
/// f32, layout of the primitive's choosing.
memory::desc any(const Shape& s, memory::data_type type = memory::data_type::f32);
/// The data type convolutions and matrix products read their inputs and weights in (bf16 in
/// a --precision bf16 plan; they accumulate and write f32 either way).
memory::data_type compute_type(const KernelContext& ctx);
/// Row-major (last dimension fastest) with no padding, in `type`.
memory::desc dense(const memory::dims& dims, memory::data_type type);
/// `md`'s dimensions and strides in `type` (dense when `md` is blocked): a reorder between the
/// two converts elements without moving them, which is far faster than one that transposes.
memory::desc same_layout(const memory::desc& md, memory::data_type type);
/// An element-wise op (operators/eltwise.hpp) as a oneDNN eltwise algorithm: forward, the
/// backward variant, alpha and beta, and whether backward reads the output (the
/// use_dst_for_bwd variants) or the input. nullopt where oneDNN has none (Erf, Sin, ...).
struct EltwiseAlgorithm {
  algorithm forward, backward;
  float alpha, beta;
  bool backward_from_dst;
};
std::optional<EltwiseAlgorithm> eltwise_algorithm(UnaryOp op, const UnaryArgs& a);
/// A binary row (operators/eltwise.hpp) as a oneDNN binary algorithm; nullopt where oneDNN
/// has none (Pow: the shared loop runs it). The one list the binary kernel, its check and its
/// registration read.
std::optional<algorithm> binary_algorithm(BinaryOp op);
/// A fused activation as an eltwise post-op (unsupported where oneDNN has no algorithm).
Expected<dnnl::primitive_attr> activation_attr(const Activation& act, const Node& node);

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
memory::desc input_md(const KernelContext& ctx, size_t i);
/// The layout to report for an output kept in `md` (nullptr when md is plain).
std::shared_ptr<const Layout> layout_of(const memory::desc& md, const Shape& shape);
/// Channels per block when `md` is [N][C / L][spatial...][L] (nCw16c, nChw16c, nCdhw16c and
/// their 8- or 4-wide forms), else 0.
int channel_lanes(const memory::desc& md);

/// Runs `fn` and turns a dnnl::error into a Status naming the node (onednn_error_status).
/// Whether a node with `work` (elements, or multiply-adds) runs Mosaic's loop instead of a
/// oneDNN primitive, whose fixed cost per call (3-5 us) dominates below `limit`.
/// MOSAIC_ONEDNN_LOOPS overrides the limits: "never" (primitives wherever oneDNN takes the
/// node), "always" (the loops wherever they apply), "auto" or unset (the limits); what
/// bench/small_ops.py sets to measure them.
bool takes_loop(double work, double limit);
/// The setting, as `mosaic backends` and provenance report it ("auto", "never", "always",
/// or "auto (MOSAIC_ONEDNN_LOOPS='x' not understood)").
std::string loop_setting();

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

/// Binds a normalisation backward's data gradient, or `scratch` (n floats) where nobody needs
/// it: the primitives always write one.
inline void bind_diff_src(Bound& b, Tensor* diff_src, std::vector<float>& scratch, int64_t n) {
  if (diff_src) {
    b.bind(diff_src);
    return;
  }
  scratch.resize(static_cast<size_t>(n));
  b.mem.set_data_handle(scratch.data());
}

/// Copies a normalisation primitive's Scale and B gradients (n each) into the gradients of
/// inputs 1 and 2, where asked.
inline void copy_scale_shift_grads(const BackwardArgs& a, const memory& diff_scale, const memory& diff_shift, int64_t n) {
  const memory* from[] = {&diff_scale, &diff_shift};
  for (size_t i = 1; i < 3 && i < a.diff_src.size(); ++i)
    if (a.diff_src[i]) {
      const float* g = static_cast<const float*>(from[i - 1]->get_data_handle());
      std::copy(g, g + n, a.diff_src[i]->f32());
    }
}

/// Scratch for blocked copies that live within one kernel call (training primitives). Calls run
/// one at a time on a thread, so every kernel's copies share a few per-thread slots, each as
/// large as its largest request. Growth is counted on the tracker of the kernel that asked.
/// Slots 0-9: a convolution's training copies use 0-6, the bf16 backward products 7 and 8.
void* transient_slot(int slot, size_t bytes, MemoryTracker* tracker);

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
  /// The copy the last get() made (or the constant's), when the weights needed one; else null.
  const memory* copy() const { return staged_.needs_reorder ? &staged_.internal : nullptr; }

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
/// conv_dense.cpp: an inference convolution on a map no larger than its kernel, at batch 8 or
/// more, as one dense matrix product in NHWC; a null kernel where that does not apply.
/// `grouped`: also a grouped convolution (the direct primitive oneDNN chose is a GEMM per group).
Expected<std::unique_ptr<Kernel>> small_map_conv(const KernelContext& ctx, bool grouped = false);
/// Whether oneDNN's int8 products sum u8 x s8 exactly for weights in [w_min, w_max] on this
/// CPU (VNNI or AMX, or 7-bit weights without): the int8 convolutions' and products' query.
bool int8_products_exact(int64_t w_min, int64_t w_max);
/// int8_matmul.cpp: MatMulInteger, QLinearMatMul and com.microsoft's MatMulIntegerToFloat on oneDNN's int8 matmul.
void add_int8_matmul_kernels(BackendRegistration& r);
// The kernel families, each in its own file; register.cpp calls them.
void add_conv_kernels(BackendRegistration& r);
void add_pool_kernels(BackendRegistration& r);
void add_gemm_kernels(BackendRegistration& r);
void add_eltwise_kernels(BackendRegistration& r);
void add_norm_kernels(BackendRegistration& r);
void add_movement_kernels(BackendRegistration& r);
void add_reduce_kernels(BackendRegistration& r);
void add_layer_norm_kernels(BackendRegistration& r);

}  // namespace mosaic::onednn_impl
