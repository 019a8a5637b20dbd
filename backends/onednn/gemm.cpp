// The oneDNN backend's gemm and MatMul through the matmul primitive.
#include <algorithm>
#include <deque>
#include <unordered_map>

#include "backends/common/gemv.hpp"
#include "backends/common/grad.hpp"
#include "backends/common/broadcast.hpp"
#include "backends/onednn/onednn_internal.hpp"

namespace mosaic::onednn_impl {
namespace {

/// C = alpha op(A) op(B) (+ C when accumulating) for the backward passes of bf16 training
/// plans: A and B (float32, any strides; B may be a bfloat16 copy already, used as it is) are
/// converted into bfloat16 copies of the same strides, the product
/// accumulates in float32 and writes C (float32, its strides). One primitive and two reorders
/// per distinct call, made on first use and kept; the copies live in shared transient slots.
class Bf16Products {
 public:
  explicit Bf16Products(MemoryTracker* tracker = nullptr) : tracker_(tracker) {}
  Bf16Products(const Bf16Products&) = delete;
  Bf16Products& operator=(const Bf16Products&) = delete;
  /// Row-major op(X) of `rows` x `cols` stored with leading dimension ld (transposed: X is
  /// stored cols x rows).
  static memory::desc strided(int64_t rows, int64_t cols, bool trans, int64_t ld) {
    return memory::desc({rows, cols}, dt::f32, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
  }
  void run(const memory::desc& a, const void* ap, const memory::desc& b, const void* bp, const memory::desc& c, void* cp,
           bool accumulate, float alpha) {
    Entry& e = entry(a, b, c, accumulate, alpha);
    e.a.set_data_handle(const_cast<void*>(ap));
    e.b.set_data_handle(const_cast<void*>(bp));
    e.c.set_data_handle(cp);
    // The bfloat16 copies live in shared per-thread slots for the call only (transient_slot).
    e.a16.set_data_handle(transient_slot(kSlotA, e.a16.get_desc().get_size(), tracker_));
    e.to_a.execute(stream(), e.a, e.a16);
    if (e.b_is_bf16) {  // already a bfloat16 copy (the forward pass's weights)
      e.b16.set_data_handle(const_cast<void*>(bp));
    } else {
      e.b16.set_data_handle(transient_slot(kSlotB, e.b16.get_desc().get_size(), tracker_));
      e.to_b.execute(stream(), e.b, e.b16);
    }
    e.prim.execute(stream(), {{DNNL_ARG_SRC, e.a16}, {DNNL_ARG_WEIGHTS, e.b16}, {DNNL_ARG_DST, e.c}});
  }

 private:
  static constexpr int kSlotA = 7, kSlotB = 8;  // after the convolution's 0-6
  struct Entry {
    memory::desc a_md, b_md, c_md;
    bool accumulate;
    float alpha;
    bool b_is_bf16;
    memory a, b, c, a16, b16;
    dnnl::reorder to_a, to_b;
    dnnl::matmul prim;
  };
  Entry& entry(const memory::desc& a, const memory::desc& b, const memory::desc& c, bool accumulate, float alpha) {
    for (auto& e : entries_)
      if (e.a_md == a && e.b_md == b && e.c_md == c && e.accumulate == accumulate && e.alpha == alpha) return e;
    const bool b_is_bf16 = b.data_type() == dt::bf16;
    Entry e{a, b, c, accumulate, alpha, b_is_bf16, {}, {}, {}, {}, {}, {}, {}, {}};
    const memory::desc a16 = same_layout(a, dt::bf16), b16 = b_is_bf16 ? b : same_layout(b, dt::bf16);
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (accumulate) {
      dnnl::post_ops ops;
      ops.append_sum(1.f);
      attr.set_post_ops(ops);
    }
    e.prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a16, b16, c), attr, engine()));
    e.a = memory(a, engine(), DNNL_MEMORY_NONE);
    e.b = memory(b, engine(), DNNL_MEMORY_NONE);
    e.c = memory(c, engine(), DNNL_MEMORY_NONE);
    e.a16 = memory(a16, engine(), DNNL_MEMORY_NONE);
    e.b16 = memory(b16, engine(), DNNL_MEMORY_NONE);
    e.to_a = dnnl::reorder(e.a, e.a16);
    if (!b_is_bf16) e.to_b = dnnl::reorder(e.b, e.b16);
    entries_.push_back(std::move(e));
    return entries_.back();
  }
  MemoryTracker* tracker_;
  std::deque<Entry> entries_;
};

/// Constant float32 weights [K, N] are packed once with each row padded by 16 floats (64
/// bytes). oneDNN's gemm reads plain weights in place, and rows whose stride is a multiple of
/// 4 KB (N = 1024, 3072, 4096) or of 3 KB (N = 768) fall into the same cache sets: on the
/// 2-core AVX2 VM [128, 768] x [768, 3072] ran at 82 GFLOP/s in place and at 174 padded,
/// [128, 768] x [768, 768] at 135 and 179, [128, 3072] x [3072, 768] at 128 and 147
/// (oneDNN 2.6, gemm:jit; its own choice, tag::any, is the plain layout here).
memory::desc padded_weights(const memory::desc& b, dt type) {
  const memory::dims& d = b.dims();
  return memory::desc(d, type, memory::dims{d[1] + 16, 1});
}

/// A product with at least this many columns of constant float32 weights runs in blocks of
/// kColumnBlock columns, one matmul call each, whose weights are packed once as contiguous
/// panels [K, kColumnBlock + 16] (ColumnPanels). oneDNN 2.6 ran BERT-Base's masked-LM head,
/// [128, 768] x [768, 30522] (94 MB of weights, 15.6 MB of logits), at about 105 GFLOP/s in
/// one call on the 2-core AVX2 VM and at about 120 in blocks of 1024 columns read in place
/// (rows 122 KB apart: every row of a block on a page of its own). On the 2-core AVX-512 Xeon,
/// 21 interleaved rounds: blocks read in place 217 GFLOP/s, one call on oneDNN's own blocked
/// layout (brg:avx512_core) 237, panels of 512 columns 285 (of 256: 274; of 1024: 272); at
/// 1024 rows all within 5% (docs/performance.md).
constexpr int64_t kColumnBlockMinN = 8192, kColumnBlock = 512;

/// Constant float32 weights [K, N] as ceil(N / width) contiguous panels, each [K, width] with
/// rows `ld` floats apart (the last panel's columns past N unused), reordered once at build.
class ColumnPanels {
 public:
  ColumnPanels() = default;
  ColumnPanels(const ColumnPanels&) = delete;
  ColumnPanels& operator=(const ColumnPanels&) = delete;
  ~ColumnPanels() {
    if (tracker_) tracker_->on_free(bytes_);
  }
  /// `b`: the constant's layout [K, N] (any strides).
  void init(const memory::desc& b, const Tensor& constant, int64_t width, int64_t ld, MemoryTracker* tracker) {
    const int64_t k = b.dims()[0], n = b.dims()[1];
    panel_floats_ = k * ld;
    const int64_t panels = (n + width - 1) / width;
    all_ = memory(memory::desc({panels * k, ld}, dt::f32, memory::dims{ld, 1}), engine());
    bytes_ = all_.get_desc().get_size();
    if (tracker) tracker->on_alloc(bytes_);
    tracker_ = tracker;
    for (int64_t c = 0; c < panels; ++c) {
      const int64_t cols = std::min(width, n - c * width);
      memory from(b.submemory_desc({k, cols}, {0, c * width}), engine(), const_cast<void*>(constant.data()));
      memory to(memory::desc({k, cols}, dt::f32, memory::dims{ld, 1}), engine(), panel(c));
      dnnl::reorder(from, to).execute(stream(), from, to);
    }
    stream().wait();
  }
  float* panel(int64_t c) const { return static_cast<float*>(all_.get_data_handle()) + c * panel_floats_; }
  size_t bytes() const { return bytes_; }

 private:
  memory all_;
  int64_t panel_floats_ = 0;
  size_t bytes_ = 0;
  MemoryTracker* tracker_ = nullptr;
};

/// dst = alpha * A x B (+ bias), A and B possibly transposed (via strides) and batched.
class MatMulBase : public Kernel {
 protected:
  Status build(const KernelContext& ctx, const memory::desc& a, const memory::desc& b, const memory::desc* bias,
               const memory::desc& y, float alpha, const Tensor* b_const) {
    node_ = ctx.node;
    return guarded(*ctx.node, [&]() -> Status {
      // bf16 plans: A and B are read as bfloat16 copies (a reorder per call; B once when constant).
      const dt ct = compute_type(ctx);
      const memory::desc a_want = ct == dt::f32 ? a : same_layout(a, ct);
      const bool padded = b_const && ct == dt::f32 && b.dims().size() == 2;
      const memory::desc b_want = !b_const ? (ct == dt::f32 ? b : same_layout(b, ct))
                                  : padded ? padded_weights(b, ct)
                                           : memory::desc(b.dims(), ct, tag::any);
      MOSAIC_ASSIGN_OR_RETURN(dnnl::primitive_attr attr, activation_attr(fused_activation(*ctx.node), *ctx.node));
      if (alpha != 1.f) attr.set_output_scales(0, {alpha});
      const int64_t n = b.dims().back();
      if (padded && n >= kColumnBlockMinN && y.dims().size() == 2) {
        // Column blocks: a panel of the weights each, views of the output and the bias at an offset.
        blocks_ = (n + kColumnBlock - 1) / kColumnBlock;
        const int64_t ld = kColumnBlock + 16, m = y.dims()[0], k = b.dims()[0];
        auto part = [&](int64_t cols, Block& blk) {
          const memory::desc bw({k, cols}, ct, memory::dims{ld, 1}), yw({m, cols}, y.data_type(), memory::dims{n, 1});
          blk.bias_cols = bias && bias->dims()[1] != 1;
          const memory::desc bb = !bias ? memory::desc()
                                  : blk.bias_cols ? memory::desc({bias->dims()[0], cols}, bias->data_type(), memory::dims{n, 1})
                                                  : *bias;
          auto d = bias ? dnnl::matmul::desc(a_want, bw, bb, yw) : dnnl::matmul::desc(a_want, bw, yw);
          dnnl::matmul::primitive_desc pd(d, attr, engine());
          blk.prim = dnnl::matmul(pd);
          blk.b = memory(bw, engine(), DNNL_MEMORY_NONE);
          blk.y = memory(yw, engine(), DNNL_MEMORY_NONE);
          if (bias) blk.bias = memory(bb, engine(), DNNL_MEMORY_NONE);
          return pd;
        };
        const auto pd = part(kColumnBlock, full_);
        part(n - (blocks_ - 1) * kColumnBlock, tail_);
        a_.init(a, pd.src_desc(), ctx.tracker, false);
        panels_.init(b, *b_const, kColumnBlock, ld, ctx.tracker);
        return Status::ok();
      }
      auto d = bias ? dnnl::matmul::desc(a_want, b_want, *bias, y) : dnnl::matmul::desc(a_want, b_want, y);
      dnnl::matmul::primitive_desc pd(d, attr, engine());
      a_.init(a, pd.src_desc(), ctx.tracker, false);
      y_.mem = memory(y, engine(), DNNL_MEMORY_NONE);
      if (bias) bias_.mem = memory(*bias, engine(), DNNL_MEMORY_NONE);
      weights_.init(b, pd.weights_desc(), b_const, ctx.tracker);
      prim_ = dnnl::matmul(pd);
      return Status::ok();
    });
  }
  void run(const Tensor* a, const Tensor* b, const void* bias, Tensor* y) {
    a_.bind_in(a);
    if (blocks_) {
      char* out = static_cast<char*>(y->data());
      const char* bs = static_cast<const char*>(bias);
      for (int64_t c = 0; c < blocks_; ++c) {
        Block& blk = c + 1 < blocks_ ? full_ : tail_;
        const size_t col = static_cast<size_t>(c * kColumnBlock);  // float32 weights, output and bias
        blk.b.set_data_handle(panels_.panel(c));
        blk.y.set_data_handle(out + col * sizeof(float));
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_.internal}, {DNNL_ARG_WEIGHTS, blk.b}, {DNNL_ARG_DST, blk.y}};
        if (bias) {
          blk.bias.set_data_handle(const_cast<char*>(bs) + (blk.bias_cols ? col * sizeof(float) : 0));
          args[DNNL_ARG_BIAS] = blk.bias;
        }
        blk.prim.execute(stream(), args);
      }
      stream().wait();
      return;
    }
    y_.bind(y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_.internal}, {DNNL_ARG_WEIGHTS, weights_.get(b)}, {DNNL_ARG_DST, y_.mem}};
    if (bias) {
      bias_.mem.set_data_handle(const_cast<void*>(bias));
      args[DNNL_ARG_BIAS] = bias_.mem;
    }
    prim_.execute(stream(), args);
    stream().wait();
  }
  size_t workspace_bytes() const override { return weights_.bytes() + panels_.bytes() + a_.owned_bytes(); }
  /// B's bfloat16 copy of the last forward call ([K, N], B's strides), in a bf16 plan whose B
  /// is not constant; else null. Training reads it for dA instead of converting B again.
  const memory* b16() const {
    const memory* c = weights_.copy();
    if (!c || c->get_desc().data_type() != dt::bf16) return nullptr;
    return c->get_desc() == same_layout(c->get_desc(), dt::bf16) ? c : nullptr;  // not blocked
  }
  const Node* node_ = nullptr;

 private:
  Staged a_;
  Bound y_, bias_;
  Weights weights_;
  ColumnPanels panels_;  ///< the weights of column blocks (kColumnBlockMinN)
  dnnl::matmul prim_;
  /// Column blocks (kColumnBlockMinN): every block but the last, and the last.
  struct Block {
    dnnl::matmul prim;
    memory b, y, bias;
    bool bias_cols = false;  ///< the bias has a value per column (else one, broadcast)
  };
  int64_t blocks_ = 0;
  Block full_, tail_;
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
    // Batch 1: a matrix-vector product reads the weights at the memory's rate, where
    // oneDNN's matmul reads its prepacked copy of them at about two thirds of it.
    if (gemv_.init(ctx, p_)) return Status::ok();
    MOSAIC_RETURN_IF_ERROR(build(ctx, a, b, c_elems_ ? &bias_md : nullptr, y, p_.alpha, ctx.constant(1)));
    if (ctx.training && !fused_activation(*ctx.node).active()) return build_backward(ctx);
    return Status::ok();
  }

  bool has_backward() const override { return trainable_; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = alpha dY op(B)^T and dB = alpha op(A)^T dY as matmuls whose transposes are strides;
  /// dC = beta dY summed over C's broadcast axes.
  Status backward(const BackwardArgs& a) override {
    auto product = [&](dnnl::matmul& prim, Bound* args, const Tensor* x, const Tensor* w, Tensor* y) {
      if (products_) {  // bf16 plan
        products_->run(args[0].mem.get_desc(), x->data(), args[1].mem.get_desc(), w->data(), args[2].mem.get_desc(),
                       y->data(), false, p_.alpha);
        return;
      }
      args[0].mem.set_data_handle(const_cast<void*>(x->data()));
      args[1].mem.set_data_handle(const_cast<void*>(w->data()));
      args[2].bind(y);
      prim.execute(stream(), {{DNNL_ARG_SRC, args[0].mem}, {DNNL_ARG_WEIGHTS, args[1].mem}, {DNNL_ARG_DST, args[2].mem}});
    };
    MOSAIC_RETURN_IF_ERROR(guarded(*node_, [&]() -> Status {
      if (a.diff_src[0] && products_ && !p_.trans_a && b16()) {
        // dA = dY op(B)^T reads the forward pass's bfloat16 op(B) [K, N] as its transpose.
        const auto& st = b16()->get_desc().data.format_desc.blocking.strides;
        const memory::desc w16({p_.n, p_.k}, dt::bf16, memory::dims{st[1], st[0]});
        products_->run(da_args_[0].mem.get_desc(), a.diff_dst[0]->data(), w16, b16()->get_data_handle(),
                       da_args_[2].mem.get_desc(), a.diff_src[0]->data(), false, p_.alpha);
      } else if (a.diff_src[0]) {
        product(da_, da_args_, p_.trans_a ? a.src[1] : a.diff_dst[0], p_.trans_a ? a.diff_dst[0] : a.src[1], a.diff_src[0]);
      }
      if (a.diff_src[1])
        product(db_, db_args_, p_.trans_b ? a.diff_dst[0] : a.src[0], p_.trans_b ? a.src[0] : a.diff_dst[0], a.diff_src[1]);
      stream().wait();
      return Status::ok();
    }));
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
    if (gemv_.active()) {
      gemv_.run(*src[0], *src[1], c_elems_ ? src[2] : nullptr, *dst[0]);
      return Status::ok();
    }
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
      if (compute_type(ctx) == dt::bf16) products_ = std::make_unique<Bf16Products>(ctx.tracker);
      return Status::ok();
    });
  }

  size_t workspace_bytes() const override { return gemv_.active() ? gemv_.workspace_bytes() : MatMulBase::workspace_bytes(); }

  GemmParams p_;
  RowGemv gemv_;  ///< batch-1 inference: used instead of the matmul primitive
  std::unique_ptr<Bf16Products> products_;  ///< bf16 training plans only
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
    if (shape_numel(p->b_batch) == 1) {
      // One B for every batch (a Linear layer's weights): the batches of A are rows of one
      // [batch * M, K] matrix. oneDNN's batched matmul with a broadcast B ran BERT-Base's
      // [1, 128, 768] x [768, 3072] at 76 GFLOP/s where the 2-d product runs at ~120.
      const int64_t rows = shape_numel(p->batch) * p->m;
      a = {rows, p->k};
      b = {p->k, p->n};
      y = {rows, p->n};
    }
    if (a.size() > 12) return Status::unsupported(ctx.node->label() + ": rank above 12");
    p_ = p.value();
    if (ctx.training && compute_type(ctx) == dt::bf16) products_ = std::make_unique<Bf16Products>(ctx.tracker);
    // Small float32 products run Mosaic's loop (common/gemv.hpp), matrix by matrix: a matmul
    // primitive call costs 2-3 us, most of the time below some 131K multiply-adds.
    const double macs = static_cast<double>(shape_numel(p_.batch)) * p_.m * p_.n * p_.k;
    // One row by constant weights (a decoder's step at batch 1): Mosaic's gemv over packed
    // panels. oneDNN 2.6's matmul read GPT-2's weights at 14.6 GB/s at M = 1, the panels at
    // 22 in the same `mosaic bench` of another hour (docs/generation.md).
    if (!takes_loop(macs, kSmallGemmMaxMacs) && gemv_.init_matmul(ctx, p_)) return Status::ok();
    if (compute_type(ctx) == dt::f32 && takes_loop(macs, kSmallGemmMaxMacs)) {
      node_ = ctx.node;
      small_ = true;
      activation_ = fused_activation(*ctx.node);
      return Status::ok();
    }
    return build(ctx, plain(a), plain(b), nullptr, plain(y), 1.f, ctx.constant(1));
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (gemv_.active()) {
      gemv_.run(*src[0], *src[1], nullptr, *dst[0]);
      return Status::ok();
    }
    if (small_) {
      const float* A = src[0]->f32();
      const float* B = src[1]->f32();
      float* C = dst[0]->f32();
      const int64_t m = p_.m, n = p_.n, k = p_.k;
      for_each_matmul_batch(p_, [&](int64_t bi, int64_t ia, int64_t ib) {
        small_gemm(m, n, k, A + ia * m * k, k, B + ib * k * n, n, C + bi * m * n, n);
      });
      activation_.apply(C, dst[0]->numel());
      return Status::ok();
    }
    run(src[0], src[1], nullptr, dst[0]);
    return Status::ok();
  }
  size_t workspace_bytes() const override {
    return gemv_.active() ? gemv_.workspace_bytes() : small_ ? 0 : MatMulBase::workspace_bytes();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = dY B^T, dB = A^T dY per batch with oneDNN's sgemm (bf16 plans: on bfloat16 copies),
  /// summed over broadcasts.
  Status backward(const BackwardArgs& a) override {
    GemmFn f32 = [](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc) {
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, A, lda, B, ldb, beta, C, ldc);
    };
    GemmFn bf16 = [this](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                         int64_t ldb, float beta, float* C, int64_t ldc) {
      products_->run(Bf16Products::strided(m, k, ta, lda), A, Bf16Products::strided(k, n, tb, ldb), B,
                     Bf16Products::strided(m, n, false, ldc), C, beta != 0.f, 1.f);
      stream().wait();
    };
    return guarded(*node_, [&]() -> Status {
      matmul_backward(p_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                      a.diff_src[0] ? a.diff_src[0]->f32() : nullptr, a.diff_src[1] ? a.diff_src[1]->f32() : nullptr,
                      products_ ? bf16 : f32);
      return Status::ok();
    });
  }

 private:
  MatMulParams p_;
  std::unique_ptr<Bf16Products> products_;
  bool small_ = false;  ///< small_gemm in place of the primitive
  Activation activation_;  ///< one the fusion pass folded in, applied after small_gemm
  RowGemv gemv_;  ///< one row by constant weights, inference
};

}  // namespace

void add_gemm_kernels(BackendRegistration& r) {
  r.kernel("Gemm", make_factory<GemmKernel>());
  r.kernel("MatMul", make_factory<MatMulKernel>());
}

}  // namespace mosaic::onednn_impl
