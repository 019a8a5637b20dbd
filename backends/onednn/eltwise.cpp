// The oneDNN backend's element-wise activations (eltwise primitive) and broadcasting binary ops
// (binary primitive). Small plain tensors, and operands the binary primitive cannot broadcast,
// run the shared loops instead (common/eltwise_loops.hpp).
#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <functional>

#include "backends/common/eltwise_loops.hpp"
#include "backends/common/grad.hpp"
#include "backends/common/support.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

/// The channel block (16 or 8) of a float32 nChw16c / nChw8c layout whose channels fill whole
/// blocks, else 0: the layouts in which a Relu at a layout boundary runs as one pass.
int64_t whole_channel_block(const memory::desc& md) {
  const memory::dims d = md.dims();
  if (d.size() != 4 || md.data_type() != memory::data_type::f32) return 0;
  for (const int64_t b : {16, 8})
    if (d[1] % b == 0 && md == memory::desc(d, memory::data_type::f32, b == 16 ? memory::format_tag::nChw16c
                                                                                 : memory::format_tag::nChw8c))
      return b;
  return 0;
}

class EltwiseKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto op = unary_op_of(ctx.node->op_type);
    if (!op) return Status::internal(ctx.node->label() + ": not an element-wise activation");
    op_ = *op;
    // Clip's bounds must be known now: oneDNN bakes them into the primitive.
    if ((ctx.has_input(1) && !ctx.constant(1)) || (ctx.has_input(2) && !ctx.constant(2)))
      return Status::unsupported(ctx.node->label() + ": Clip bounds computed at run time");
    // The forward algorithm and the one backward uses: the use_dst_for_bwd variants
    // differentiate from the output, so the plan need not keep the input.
    const auto alg = eltwise_algorithm(op_, unary_args(op_, ctx));
    if (!alg) return Status::unsupported(ctx.node->label() + ": oneDNN has no eltwise algorithm for " + ctx.node->op_type);
    from_dst_ = alg->backward_from_dst;
    const float alpha = alg->alpha, beta = alg->beta;
    return guarded(*ctx.node, [&]() -> Status {
      // Element-wise in the input's layout; the output is reordered to plain if it must be.
      const memory::desc md = input_md(ctx, 0);
      const Shape& ys = ctx.outputs[0].shape;
      dnnl::eltwise_forward::desc d(prop_kind::forward_inference, alg->forward, md, alpha, beta);
      prim_ = dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, engine()));
      const memory::desc out_md = ctx.layout_free(0) ? md : plain(ys);
      if (ctx.training) {
        dnnl::eltwise_forward::primitive_desc hint(
            dnnl::eltwise_forward::desc(prop_kind::forward_training, alg->backward, md, alpha, beta), engine());
        dnnl::eltwise_backward::desc bd(alg->backward, md, md, alpha, beta);
        bwd_ = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, engine(), hint));
        // Backward runs in the input's layout, where dx is written. The output and its
        // gradient are plain if the input is in a layout its consumers cannot read: they are
        // reordered in through transient slots.
        b_data_.init(from_dst_ ? out_md : md, md, ctx.tracker, false, 0);
        b_diff_dst_.init(out_md, md, ctx.tracker, false, 1);
        b_diff_src_.mem = memory(md, engine(), DNNL_MEMORY_NONE);
        trainable_ = true;
      }
      src_.mem = memory(md, engine(), DNNL_MEMORY_NONE);
      out_layout_ = layout_of(out_md, ys);
      // A Relu from a blocked layout to plain: one pass each way (relu_to_plain), no staging.
      if (op_ == UnaryOp::kRelu && alpha == 0.f && out_md != md && (!ctx.training || from_dst_))
        boundary_block_ = whole_channel_block(md);
      if (boundary_block_) {
        const memory::dims d = md.dims();
        dims_ = {d[0], d[1], d[2] * d[3]};
        return Status::ok();
      }
      dst_.init(out_md, md, ctx.tracker, true);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (boundary_block_) {
      relu_to_plain(src[0]->f32(), dst[0]->f32(), dims_[0], dims_[1], dims_[2], boundary_block_);
      return Status::ok();
    }
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
  bool backward_reads_input(size_t i) const override { return i > 0 || !from_dst_; }
  bool backward_reads_output(size_t) const override { return from_dst_; }
  Status backward(const BackwardArgs& a) override {
    for (size_t i = 1; i < a.diff_src.size(); ++i)
      zeroed_grad(a, i);
    if (!a.diff_src[0]) return Status::ok();
    if (boundary_block_) {
      relu_grad_to_blocked(a.dst[0]->f32(), a.diff_dst[0]->f32(), a.diff_src[0]->f32(), dims_[0], dims_[1], dims_[2],
                           boundary_block_);
      return Status::ok();
    }
    b_data_.bind_in(from_dst_ ? a.dst[0] : a.src[0]);
    b_diff_dst_.bind_in(a.diff_dst[0]);
    b_diff_src_.bind(a.diff_src[0]);
    bwd_.execute(stream(), {{from_dst_ ? DNNL_ARG_DST : DNNL_ARG_SRC, b_data_.internal},
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
  UnaryOp op_ = UnaryOp::kRelu;
  bool from_dst_ = false;
  int64_t boundary_block_ = 0;  ///< relu_to_plain's channel block; 0: oneDNN's eltwise
  std::array<int64_t, 3> dims_{};  ///< N, C, H x W where boundary_block_
  dnnl::eltwise_backward bwd_;
  Staged b_data_, b_diff_dst_;
  Bound b_diff_src_;
};

class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto op = binary_op_of(ctx.node->op_type);
    if (!op) return Status::internal(ctx.node->label() + ": not a binary op");
    op_ = *op;
    const auto found = binary_algorithm(op_);
    if (!found) return Status::unsupported(ctx.node->label() + ": oneDNN has no binary algorithm for " + ctx.node->op_type);
    const algorithm alg = *found;
    const Shape& out = ctx.outputs[0].shape;
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    out_shape_ = out;
    Shape a = ctx.inputs[0].shape, b = ctx.inputs[1].shape;
    a.insert(a.begin(), out.size() - a.size(), 1);
    b.insert(b.begin(), out.size() - b.size(), 1);
    // oneDNN broadcasts src1 only; commutative ops may swap operands, and Sub swaps them
    // and negates the result (a - b = -(b - a), exact in float) with a linear post-op.
    if (a != out) {
      if (b == out && (op_ == BinaryOp::kAdd || op_ == BinaryOp::kMul || op_ == BinaryOp::kSub)) {
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
      dnnl::primitive_attr attr;
      if (swapped_ && op_ == BinaryOp::kSub) {
        dnnl::post_ops negate;
        negate.append_eltwise(1.f, algorithm::eltwise_linear, -1.f, 0.f);
        attr.set_post_ops(negate);
      }
      dnnl::binary::primitive_desc pd(d, attr, engine());
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
  bool backward_reads_input(size_t) const override { return binary_info(op_).backward_reads_inputs; }
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

Status unary_supported(const KernelContext& ctx) {
  MOSAIC_RETURN_IF_ERROR(float32_only(ctx));
  const UnaryOp op = *unary_op_of(ctx.node->op_type);
  if (!eltwise_algorithm(op, unary_args(op, ctx)))
    return Status::unsupported(ctx.node->label() + ": oneDNN has no eltwise algorithm for " + ctx.node->op_type);
  return Status::ok();
}

Status binary_supported(const KernelContext& ctx) {
  MOSAIC_RETURN_IF_ERROR(float32_only(ctx));
  if (!binary_algorithm(*binary_op_of(ctx.node->op_type)))
    return Status::unsupported(ctx.node->label() + ": oneDNN has no binary algorithm for " + ctx.node->op_type);
  return Status::ok();
}

/// Whether every input is plain (no oneDNN layout), so the shared loops can read them.
bool plain_inputs(const KernelContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i)
    if (ctx.input_layout(i)) return false;
  return true;
}

/// The oneDNN kernel K, or the shared loop kernel where the node's output has at most
/// `max_elements` elements and its inputs are plain (a primitive call's fixed 3-5 us is
/// then most of the time), or where oneDNN declines a node whose inputs are plain (a
/// broadcast of the first operand, Clip's bounds computed at run time).
template <class K>
KernelFactory primitive_or_loop(KernelFactory loop, std::function<int64_t(const KernelContext&)> max_elements) {
  return [loop = std::move(loop), max_elements = std::move(max_elements)](
             const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    const bool plain = plain_inputs(ctx);
    if (plain && takes_loop(static_cast<double>(ctx.outputs[0].numel()), static_cast<double>(max_elements(ctx))))
      return loop(ctx);
    auto k = make_factory<K>()(ctx);
    if (!k.ok() && k.status().code() == StatusCode::kUnsupported && plain) return loop(ctx);
    return k;
  };
}

}  // namespace

void add_eltwise_kernels(BackendRegistration& r) {
  // Element-wise chains stay in blocked layouts; binary ops in inference only.
  // Only the ops oneDNN has an algorithm for are registered, and Pow, which the shared loop
  // runs; the checks decline what an attribute rules out.
  const auto binary_max = [](const KernelContext&) { return kLoopMaxElements; };
  const auto unary_max = [](const KernelContext& ctx) {
    return unary_loop_vectorised(*unary_op_of(ctx.node->op_type)) ? kLoopMaxElements : kScalarLoopMaxElements;
  };
  for (const auto& b : kBinaryOps)
    if (binary_algorithm(b.op))
      r.kernel(b.name, primitive_or_loop<BinaryKernel>(binary_loop_factory(), binary_max),
               {LayoutUse::kInference, binary_supported});
  r.kernel("Pow", binary_loop_factory(), {LayoutUse::kNone, float32_only});
  for (const auto& u : kUnaryOps)
    if (eltwise_algorithm(u.op, UnaryArgs{}))
      r.kernel(u.name, primitive_or_loop<EltwiseKernel>(unary_loop_factory(), unary_max),
               {LayoutUse::kTraining, unary_supported});
}

}  // namespace mosaic::onednn_impl
