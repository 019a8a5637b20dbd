// The oneDNN backend's data movement: concat, transpose (a reorder), constant pad (a reorder into a
// sub-memory), and the planner's conversion from a oneDNN layout to plain.
#include <algorithm>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "backends/common/grad.hpp"
#include "backends/common/movement.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

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

/// The Pads oneDNN's reorders can do: constant, known at plan time, float, not cropping.
Status pad_supported(const KernelContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(PadParams p, pad_params(ctx));
  // 8-bit codes (a QDQ model's pads once its float stretch is a table: core/fuse_qdq_codes.cpp)
  // take the shared byte-moving kernel, in any mode.
  if (ctx.inputs[0].dtype == DType::kU8 || ctx.inputs[0].dtype == DType::kI8) return Status::ok();
  if (p.mode != "constant") return Status::unsupported(ctx.node->label() + ": oneDNN has no " + p.mode + " padding");
  if (p.value_at_run_time) return Status::unsupported(ctx.node->label() + ": pad value computed at run time");
  if (ctx.inputs[0].dtype != DType::kF32) return Status::unsupported(ctx.node->label() + ": non-float pad");
  for (auto v : p.pads)
    if (v < 0) return Status::unsupported(ctx.node->label() + ": negative pads (cropping)");
  if (ctx.inputs[0].numel() == 0 || ctx.inputs[0].shape.empty())
    return Status::unsupported(ctx.node->label() + ": empty input");
  return Status::ok();
}

/// Constant Pad: fill the output, then reorder the input into the interior sub-memory.
/// Works in the input's layout when it is channel-blocked and only spatial axes are padded.
class PadKernel final : public ReorderKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(PadParams p, pad_params(ctx));
    const size_t r = ctx.inputs[0].shape.size();
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

void add_movement_kernels(BackendRegistration& r) {
  // Concat: oneDNN's primitive (parallel copies) above 256K elements; below, and for other
  // element types, the shared copy loop, faster there (1.6x at 256K, 3-18x below:
  // bench/small_ops.py).
  r.kernel("Concat", [shared = movement_kernel_factory("Concat")](const KernelContext& ctx) {
    return ctx.outputs[0].dtype != DType::kF32 || takes_loop(static_cast<double>(ctx.outputs[0].numel()), 262144)
               ? shared(ctx)
               : make_factory<ConcatKernel>()(ctx);
  }, {LayoutUse::kNone, nullptr, kAllDTypes});
  r.kernel("Transpose", make_factory<TransposeKernel>());
  r.kernel("Pad",
           [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
             if (ctx.inputs[0].dtype == DType::kF32) return make_factory<PadKernel>()(ctx);
             if (ctx.input_layout(0)) return Status::unsupported(ctx.node->label() + ": 8-bit pad reads plain tensors");
             return movement_kernel_factory("Pad")(ctx);
           },
           {LayoutUse::kTraining, pad_supported, kBaseDTypes | dtype_bit(DType::kU8) | dtype_bit(DType::kI8)});
  r.kernel(kToPlainOp, make_factory<ToPlainKernel>());
}

}  // namespace mosaic::onednn_impl
