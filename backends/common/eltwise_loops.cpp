#include "backends/common/eltwise_loops.hpp"

#include <algorithm>

#include "backends/common/broadcast.hpp"
#include "backends/common/fast_exp.hpp"
#include "backends/common/grad.hpp"

namespace mosaic {
namespace {

/// Broadcast binary op: the output is walked row by row over its trailing (collapsed) axes,
/// where each operand is either contiguous or a repeated scalar.
class BinaryLoopKernel final : public Kernel {
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
    // A trailing 1 is a row of one element: either view works.
    a_row_ = sa_[axis] == 1 || out_[axis] == 1;
    b_row_ = sb_[axis] == 1 || out_[axis] == 1;
    while (axis > 0) {
      const int64_t prev = axis - 1;
      const bool ok_a = a_row_ ? sa_[prev] == row_ || out_[prev] == 1 : sa_[prev] == 0;
      const bool ok_b = b_row_ ? sb_[prev] == row_ || out_[prev] == 1 : sb_[prev] == 0;
      if (!ok_a || !ok_b) break;
      row_ *= out_[prev];
      axis = prev;
    }
    outer_axes_ = axis;
    const Tensor* b = ctx.constant(1);
    square_ = op_ == BinaryOp::kPow && b && b->dtype() == DType::kF32 && b->numel() == 1 && b->f32()[0] == 2.f;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    const int64_t rows = shape_numel(out_) / std::max<int64_t>(row_, 1);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * row_ > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t oa = 0, ob = 0, rem = r;
      for (int64_t d = outer_axes_ - 1; d >= 0; --d) {
        const int64_t i = rem % out_[d];
        rem /= out_[d];
        oa += i * sa_[d];
        ob += i * sb_[d];
      }
      float* yr = y + r * row_;
      if (a_row_ && b_row_) row<true, true>(yr, a + oa, b + ob);
      else if (a_row_) row<true, false>(yr, a + oa, b + ob);
      else if (b_row_) row<false, true>(yr, a + oa, b + ob);
      else row<false, false>(yr, a + oa, b + ob);
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return binary_info(op_).backward_reads_inputs; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& g) override {
    binary_backward(op_, a_shape_, b_shape_, out_, g.src[0]->f32(), g.src[1]->f32(), g.diff_dst[0]->f32(),
                    g.diff_src[0] ? g.diff_src[0]->f32() : nullptr, g.diff_src[1] ? g.diff_src[1]->f32() : nullptr);
    return Status::ok();
  }

 private:
  /// One row: operand values at i (AR, BR: contiguous) or its one repeated value.
  template <bool AR, bool BR>
  void row(float* y, const float* a, const float* b) const {
    const int64_t n = row_;
    auto av = [a](int64_t i) { return AR ? a[i] : a[0]; };
    auto bv = [b](int64_t i) { return BR ? b[i] : b[0]; };
    switch (op_) {
      case BinaryOp::kAdd: for (int64_t i = 0; i < n; ++i) y[i] = av(i) + bv(i); return;
      case BinaryOp::kSub: for (int64_t i = 0; i < n; ++i) y[i] = av(i) - bv(i); return;
      case BinaryOp::kMul: for (int64_t i = 0; i < n; ++i) y[i] = av(i) * bv(i); return;
      case BinaryOp::kDiv: for (int64_t i = 0; i < n; ++i) y[i] = av(i) / bv(i); return;
      case BinaryOp::kPow:
        if (square_) {
          for (int64_t i = 0; i < n; ++i) y[i] = av(i) * av(i);
          return;
        }
        break;
      case BinaryOp::kCount: break;
    }
    for (int64_t i = 0; i < n; ++i) y[i] = binary_forward(op_, av(i), bv(i));
  }
  BinaryOp op_ = BinaryOp::kAdd;
  Shape out_, a_shape_, b_shape_;
  std::vector<int64_t> sa_, sb_;
  int64_t row_ = 1, outer_axes_ = 0;
  bool a_row_ = true, b_row_ = true;
  bool square_ = false;  ///< Pow by a constant 2
};

/// The loop's own blocks: vectorised forms of the cheap ops and of exp, sigmoid and tanh,
/// the row's rule (in double, rounded once) for the others.
void loop_forward_block(UnaryOp op, const UnaryArgs& a, const float* x, float* y, int64_t n) {
  switch (op) {
    case UnaryOp::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.f; return;
    case UnaryOp::kNeg: for (int64_t i = 0; i < n; ++i) y[i] = -x[i]; return;
    case UnaryOp::kAbs: for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? -x[i] : x[i]; return;
    case UnaryOp::kSqrt: for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]); return;
    case UnaryOp::kReciprocal: for (int64_t i = 0; i < n; ++i) y[i] = 1.f / x[i]; return;
    case UnaryOp::kLeakyRelu: {
      const auto alpha = static_cast<float>(a.alpha);
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0 ? x[i] : alpha * x[i];
      return;
    }
    case UnaryOp::kExp: exp_array(x, y, n); return;
    case UnaryOp::kSigmoid: sigmoid_array(x, y, n); return;
    case UnaryOp::kTanh: tanh_array(x, y, n); return;
    default: break;  // Clip (NaN and its bounds' conventions) and the rest: the row's rule
  }
  for (int64_t i = 0; i < n; ++i) y[i] = unary_forward(op, x[i], a);
}

/// dx = dy * op'(x) by the row's derivative (PyTorch's conventions at kinks), as naive.
void loop_backward_block(UnaryOp op, const UnaryArgs& a, const float* x, const float* y, const float* dy, float* dx,
                         int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * unary_derivative(op, x ? x[i] : 0.f, y ? y[i] : 0.f, a);
}

class UnaryLoopKernel final : public Kernel {
 public:
  UnaryLoopKernel(UnaryForwardBlock forward, UnaryBackwardBlock backward) : forward_(forward), backward_(backward) {}
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
#pragma omp parallel for schedule(static) if (n > 4 * kBlock)
    for (int64_t b0 = 0; b0 < n; b0 += kBlock)
      forward_(op_, args, src[0]->f32() + b0, dst[0]->f32() + b0, std::min(kBlock, n - b0));
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i > 0 || unary_info(op_).backward_reads_input; }
  bool backward_reads_output(size_t) const override { return unary_info(op_).backward_reads_output; }
  Status backward(const BackwardArgs& g) override {
    for (size_t i = 1; i < g.diff_src.size(); ++i)
      zeroed_grad(g, i);
    if (!g.diff_src[0]) return Status::ok();
    const int64_t n = g.diff_dst[0]->numel();
    const UnaryArgs args = with_runtime_bounds(g.src);
    const float* x = unary_info(op_).backward_reads_input ? g.src[0]->f32() : nullptr;
    const float* y = unary_info(op_).backward_reads_output ? g.dst[0]->f32() : nullptr;
#pragma omp parallel for schedule(static) if (n > 4 * kBlock)
    for (int64_t b0 = 0; b0 < n; b0 += kBlock)
      backward_(op_, args, x ? x + b0 : nullptr, y ? y + b0 : nullptr, g.diff_dst[0]->f32() + b0,
                g.diff_src[0]->f32() + b0, std::min(kBlock, n - b0));
    return Status::ok();
  }

 private:
  static constexpr int64_t kBlock = 1 << 14;  ///< elements per block, the threads' unit of work
  /// Clip's bounds given as inputs computed at run time override the load-time ones.
  UnaryArgs with_runtime_bounds(const std::vector<const Tensor*>& src) const {
    UnaryArgs args = args_;
    if (src.size() > 1 && src[1]) args.lo = src[1]->f32()[0];
    if (src.size() > 2 && src[2]) args.hi = src[2]->f32()[0];
    return args;
  }
  UnaryForwardBlock forward_;
  UnaryBackwardBlock backward_;
  UnaryOp op_ = UnaryOp::kRelu;
  UnaryArgs args_;
};

}  // namespace

KernelFactory binary_loop_factory() { return make_factory<BinaryLoopKernel>(); }
KernelFactory unary_loop_factory(UnaryForwardBlock forward, UnaryBackwardBlock backward) {
  if (!forward) forward = loop_forward_block;
  if (!backward) backward = loop_backward_block;
  return [forward, backward](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<UnaryLoopKernel>(forward, backward);
    MOSAIC_RETURN_IF_ERROR(k->init(ctx));
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

bool unary_loop_vectorised(UnaryOp op) {
  switch (op) {
    case UnaryOp::kRelu:
    case UnaryOp::kNeg:
    case UnaryOp::kAbs:
    case UnaryOp::kSqrt:
    case UnaryOp::kReciprocal:
    case UnaryOp::kLeakyRelu: return true;
    default: return false;
  }
}

void relu_to_plain(const float* x, float* y, int64_t n, int64_t c, int64_t hw, int64_t block) {
  const int64_t blocks = c / block;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* from = x + (i * blocks + b) * hw * block;
      float* to = y + (i * c + b * block) * hw;
      for (int64_t l = 0; l < block; ++l)
        for (int64_t p = 0; p < hw; ++p) to[l * hw + p] = std::max(from[p * block + l], 0.f);
    }
}

void relu_grad_to_blocked(const float* y, const float* dy, float* dx, int64_t n, int64_t c, int64_t hw, int64_t block) {
  const int64_t blocks = c / block;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t plain = (i * c + b * block) * hw;
      float* to = dx + (i * blocks + b) * hw * block;
      for (int64_t l = 0; l < block; ++l) {
        const float* yl = y + plain + l * hw;
        const float* dyl = dy + plain + l * hw;
        for (int64_t p = 0; p < hw; ++p) to[p * block + l] = yl[p] > 0.f ? dyl[p] : 0.f;
      }
    }
}

}  // namespace mosaic
