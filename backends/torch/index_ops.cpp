// torch: the indexing, selection and comparison ops a transformer needs, as PyTorch's eager
// mode runs them: Transpose (permute, made contiguous), Slice (index_select per sliced
// axis; backward index_add), Gather (index_select, what nn.Embedding's lookup does;
// backward index_add, the scatter-add of embedding_backward), Expand (expand; backward
// sum_to_size), Where (at::where), the comparisons and logical ops (at::eq, at::lt, ...,
// at::logical_and, ...), Not and Cast. Their tensors may be int64 or bool as well as float.
#include <array>

#include "backends/common/movement.hpp"
#include "backends/torch/torch_kernel.hpp"
#include "operators/eltwise.hpp"

namespace mosaic::torch_backend {
namespace {

/// A kernel over tensors of any dtype: the float-only check of init_base is skipped, and
/// gradients flow only where the data is float32.
class AnyTypeKernel : public TorchKernel {
 protected:
  Status init_any(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx, 0, false));
    float_ = ctx.outputs[0].dtype == DType::kF32;
    return Status::ok();
  }
  bool float_ = false;

 public:
  bool has_backward() const override { return float_; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
};

class TransposeKernel final : public AnyTypeKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_any(ctx));
    MOSAIC_ASSIGN_OR_RETURN(perm_, transpose_perm(ctx));
    inverse_.assign(perm_.size(), 0);
    for (size_t i = 0; i < perm_.size(); ++i) inverse_[static_cast<size_t>(perm_[i])] = static_cast<int64_t>(i);
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    write(view(src[0]).permute(perm_), dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    if (a.diff_src[0]) write(view(a.diff_dst[0]).permute(inverse_), a.diff_src[0]);
  }
  std::vector<int64_t> perm_, inverse_;
};

/// Slice: every axis whose map is not the whole axis in order is an index_select.
class SliceKernel final : public AnyTypeKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_any(ctx));
    MOSAIC_ASSIGN_OR_RETURN(AxisMaps maps, slice_axis_maps(ctx));
    in_ = ctx.inputs[0].shape;
    for (size_t a = 0; a < maps.size(); ++a) {
      bool identity = static_cast<int64_t>(maps[a].size()) == in_[a];
      for (size_t i = 0; identity && i < maps[a].size(); ++i) identity = maps[a][i] == static_cast<int64_t>(i);
      if (!identity)
        picks_.push_back({static_cast<int64_t>(a), at::tensor(at::ArrayRef<int64_t>(maps[a]), at::kLong)});
    }
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor y = view(src[0]);
    for (const auto& [axis, idx] : picks_) y = at::index_select(y, axis, idx);
    write(y, dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    at::Tensor g = view(a.diff_dst[0]);
    Shape shape = a.diff_dst[0]->shape();
    for (size_t k = picks_.size(); k-- > 0;) {  // undo the selections, last first
      const auto& [axis, idx] = picks_[k];
      shape[static_cast<size_t>(axis)] = in_[static_cast<size_t>(axis)];
      g = at::zeros(at::IntArrayRef(shape), g.options()).index_add_(axis, idx, g);
    }
    write(g, a.diff_src[0]);
  }
  Shape in_;
  std::vector<std::pair<int64_t, at::Tensor>> picks_;
};

/// Gather (embedding lookups): indices checked against the axis first, with the message
/// the shared kernel gives, then index_select; backward index_add into zeros.
class GatherKernel final : public AnyTypeKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_any(ctx));
    const Shape& x = ctx.inputs[0].shape;
    MOSAIC_ASSIGN_OR_RETURN(axis_, normalize_axis(ctx.node->attr_int("axis", 0), static_cast<int64_t>(x.size()),
                                                  *ctx.node));
    dim_ = x[static_cast<size_t>(axis_)];
    out_ = ctx.outputs[0].shape;
    input_ = ctx.node->inputs[1];
    return Status::ok();
  }
  bool backward_reads_input(size_t i) const override { return i == 1; }

 private:
  at::Tensor indices(const Tensor* t) const {
    const int64_t* idx = t->i64();
    for (int64_t j = 0; j < t->numel(); ++j)
      if (idx[j] < -dim_ || idx[j] >= dim_)
        throw std::invalid_argument("input '" + input_ + "': index " + std::to_string(idx[j]) + " (element " +
                                    std::to_string(j) + ") is outside the gathered axis of size " +
                                    std::to_string(dim_));
    at::Tensor i = view(t).reshape({-1});
    return at::where(i < 0, i + dim_, i);
  }
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    write(at::index_select(view(src[0]), axis_, indices(src[1])), dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return;
    const at::Tensor idx = indices(a.src[1]);
    Shape flat = a.diff_src[0]->shape();
    flat[static_cast<size_t>(axis_)] = idx.numel();
    at::Tensor dx = view(a.diff_src[0]);
    dx.zero_();
    dx.index_add_(axis_, idx, view(a.diff_dst[0]).reshape(at::IntArrayRef(flat)));
  }
  int64_t axis_ = 0, dim_ = 1;
  Shape out_;
  std::string input_;
};

class ExpandKernel final : public AnyTypeKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_any(ctx));
    in_ = ctx.inputs[0].shape;
    out_ = ctx.outputs[0].shape;
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    at::Tensor x = view(src[0]);
    Shape aligned(out_.size() - in_.size(), 1);  // numpy: missing leading axes are 1
    aligned.insert(aligned.end(), in_.begin(), in_.end());
    write(x.reshape(at::IntArrayRef(aligned)).expand(at::IntArrayRef(out_)), dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    if (a.diff_src[0]) write(reduce_to(view(a.diff_dst[0]), in_), a.diff_src[0]);
  }
  Shape in_, out_;
};

class WhereKernel final : public AnyTypeKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_any(ctx));
    a_ = ctx.inputs[1].shape;
    b_ = ctx.inputs[2].shape;
    return Status::ok();
  }
  bool backward_reads_input(size_t i) const override { return i == 0; }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    write(at::where(view(src[0]), view(src[1]), view(src[2])), dst[0]);
  }
  void run_backward(const BackwardArgs& a) override {
    const at::Tensor dy = view(a.diff_dst[0]), c = view(a.src[0]), zero = at::zeros({}, dy.options());
    if (a.diff_src.size() > 1 && a.diff_src[1]) write(reduce_to(at::where(c, dy, zero), a_), a.diff_src[1]);
    if (a.diff_src.size() > 2 && a.diff_src[2]) write(reduce_to(at::where(c, zero, dy), b_), a.diff_src[2]);
  }
  Shape a_, b_;
};

at::Tensor compare(CompareOp op, const at::Tensor& x, const at::Tensor& y) {
  switch (op) {
    case CompareOp::kEqual: return at::eq(x, y);
    case CompareOp::kLess: return at::lt(x, y);
    case CompareOp::kLessOrEqual: return at::le(x, y);
    case CompareOp::kGreater: return at::gt(x, y);
    case CompareOp::kGreaterOrEqual: return at::ge(x, y);
    case CompareOp::kAnd: return at::logical_and(x, y);
    case CompareOp::kOr: return at::logical_or(x, y);
    case CompareOp::kXor: return at::logical_xor(x, y);
    case CompareOp::kCount: break;
  }
  throw std::logic_error("not a comparison");
}

/// The comparisons and logical ops of kCompareOps, Not, and Cast: outputs without gradient.
class LogicKernel final : public AnyTypeKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_any(ctx));
    float_ = false;
    op_ = compare_op_of(ctx.node->op_type);
    not_ = ctx.node->op_type == "Not";
    return Status::ok();
  }

 private:
  void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const at::Tensor x = view(src[0]);
    if (op_) write(compare(*op_, x, view(src[1])), dst[0]);
    else if (not_) write(at::logical_not(x), dst[0]);
    else write(x, dst[0]);  // Cast: write converts to the output's dtype
  }
  std::optional<CompareOp> op_;
  bool not_ = false;
};

}  // namespace

void add_index_kernels(BackendRegistration& r) {
  r.kernel("Transpose", make_factory<TransposeKernel>())
      .kernel("Slice", make_factory<SliceKernel>())
      .kernel("Gather", make_factory<GatherKernel>())
      .kernel("Expand", make_factory<ExpandKernel>())
      .kernel("Where", make_factory<WhereKernel>());
  for (const auto& c : kCompareOps) r.kernel(c.name, make_factory<LogicKernel>());
  for (const char* op : {"Cast", "Not"}) r.kernel(op, make_factory<LogicKernel>());
}

}  // namespace mosaic::torch_backend
