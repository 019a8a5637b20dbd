// The im2col backend's broadcasting binary ops and element-wise activations: Eigen's
// vectorised forms of the common ops, the table's rules (operators/eltwise.hpp) for the rest.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/common/broadcast.hpp"
#include "backends/common/grad.hpp"
#include "backends/common/support.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {
namespace {

/// Broadcast binary op: the output is walked row by row over its last (collapsed) axis,
/// where each operand is either contiguous or a broadcast scalar, and Eigen does the row.
class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto op = binary_op_of(ctx.node->op_type);
    if (!op) return Status::internal(ctx.node->label() + ": not a binary op");
    op_ = *op;
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    out_ = ctx.outputs[0].shape;
    if (out_.empty()) out_ = {1};
    sa_ = broadcast_strides(ctx.inputs[0].shape, out_);
    sb_ = broadcast_strides(ctx.inputs[1].shape, out_);
    // Collapse trailing axes whose operand strides stay contiguous (or stay broadcast).
    row_ = out_.back();
    int64_t axis = static_cast<int64_t>(out_.size()) - 1;
    const bool a_contig = sa_[axis] == 1, b_contig = sb_[axis] == 1;
    while (axis > 0) {
      const int64_t prev = axis - 1;
      const bool ok_a = a_contig ? sa_[prev] == row_ : sa_[prev] == 0;
      const bool ok_b = b_contig ? sb_[prev] == row_ : sb_[prev] == 0;
      if (!ok_a || !ok_b) break;
      row_ *= out_[prev];
      axis = prev;
    }
    outer_axes_ = axis;
    a_row_ = a_contig;
    b_row_ = b_contig;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    const int64_t rows = shape_numel(out_) / row_;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * row_ > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t oa = 0, ob = 0, rem = r;
      for (int64_t d = outer_axes_ - 1; d >= 0; --d) {
        const int64_t i = rem % out_[d];
        rem /= out_[d];
        oa += i * sa_[d];
        ob += i * sb_[d];
      }
      ArrayMap yr(y + r * row_, row_);
      if (a_row_ && b_row_) apply(yr, ConstArrayMap(a + oa, row_), ConstArrayMap(b + ob, row_));
      else if (a_row_) apply(yr, ConstArrayMap(a + oa, row_), b[ob]);
      else if (b_row_) apply(yr, a[oa], ConstArrayMap(b + ob, row_));
      else yr.setConstant(binary_forward(op_, a[oa], b[ob]));
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return binary_info(op_).backward_reads_inputs; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    binary_backward(op_, a_shape_, b_shape_, out_, a.src[0]->f32(), a.src[1]->f32(),
                    a.diff_dst[0]->f32(), a.diff_src[0] ? a.diff_src[0]->f32() : nullptr,
                    a.diff_src[1] ? a.diff_src[1]->f32() : nullptr);
    return Status::ok();
  }

 private:
  template <class A, class B>
  void apply(ArrayMap& y, const A& a, const B& b) const {
    switch (op_) {
      case BinaryOp::kAdd: y = a + b; return;
      case BinaryOp::kSub: y = a - b; return;
      case BinaryOp::kMul: y = a * b; return;
      case BinaryOp::kDiv: y = a / b; return;
      default: break;  // the others: the row's scalar rule
    }
    for (Eigen::Index i = 0; i < y.size(); ++i) y[i] = binary_forward(op_, at(a, i), at(b, i));
  }
  static float at(const ConstArrayMap& v, Eigen::Index i) { return v[i]; }
  static float at(float v, Eigen::Index) { return v; }
  BinaryOp op_ = BinaryOp::kAdd;
  Shape out_, a_shape_, b_shape_;
  std::vector<int64_t> sa_, sb_;
  int64_t row_ = 1, outer_axes_ = 0;
  bool a_row_ = true, b_row_ = true;
};

class UnaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto op = unary_op_of(ctx.node->op_type);
    if (!op) return Status::internal(ctx.node->label() + ": not an element-wise activation");
    op_ = *op;
    args_ = unary_args(op_, ctx);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t n = src[0]->numel();
    const UnaryArgs args = with_runtime_bounds(src);
    const int64_t block = 1 << 14;
#pragma omp parallel for schedule(static) if (n > 4 * block)
    for (int64_t b0 = 0; b0 < n; b0 += block)
      unary_forward_block(op_, args, src[0]->f32() + b0, dst[0]->f32() + b0, std::min(block, n - b0));
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i > 0 || unary_info(op_).backward_reads_input; }
  bool backward_reads_output(size_t) const override { return unary_info(op_).backward_reads_output; }
  /// The same derivatives (and kink conventions) as naive, in blocks over the threads.
  Status backward(const BackwardArgs& a) override {
    for (size_t i = 1; i < a.diff_src.size(); ++i)
      zeroed_grad(a, i);
    if (!a.diff_src[0]) return Status::ok();
    const int64_t n = a.diff_dst[0]->numel();
    const UnaryArgs args = with_runtime_bounds(a.src);
    const float* x = unary_info(op_).backward_reads_input ? a.src[0]->f32() : nullptr;
    const float* y = unary_info(op_).backward_reads_output ? a.dst[0]->f32() : nullptr;
    const int64_t block = 1 << 14;
#pragma omp parallel for schedule(static) if (n > 4 * block)
    for (int64_t b0 = 0; b0 < n; b0 += block)
      unary_backward_block(op_, args, x ? x + b0 : nullptr, y ? y + b0 : nullptr, a.diff_dst[0]->f32() + b0,
                           a.diff_src[0]->f32() + b0, std::min(block, n - b0));
    return Status::ok();
  }

 private:
  /// Clip's bounds given as inputs computed at run time override the load-time ones.
  UnaryArgs with_runtime_bounds(const std::vector<const Tensor*>& src) const {
    UnaryArgs args = args_;
    if (src.size() > 1 && src[1]) args.lo = src[1]->f32()[0];
    if (src.size() > 2 && src[2]) args.hi = src[2]->f32()[0];
    return args;
  }
  UnaryOp op_ = UnaryOp::kRelu;
  UnaryArgs args_;
};

}  // namespace

void add_eltwise_kernels(BackendRegistration& r) {
  for (const auto& b : kBinaryOps) r.kernel(b.name, make_factory<BinaryKernel>(), {LayoutUse::kNone, float32_only});
  for (const auto& u : kUnaryOps) r.kernel(u.name, make_factory<UnaryKernel>(), {LayoutUse::kNone, float32_only});
}

}  // namespace mosaic::im2col_impl
