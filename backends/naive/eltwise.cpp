// The naive oracle's broadcasting binary ops and element-wise activations, forward and backward:
// every row of the tables in operators/eltwise.hpp, computed with the row's own rules.
#include <algorithm>
#include <cmath>

#include "backends/common/broadcast.hpp"
#include "backends/common/grad.hpp"
#include "backends/naive/naive_internal.hpp"

namespace mosaic::naive_impl {
namespace {

class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto op = binary_op_of(ctx.node->op_type);
    if (!op) return Status::internal(ctx.node->label() + ": not a binary op");
    op_ = *op;
    out_ = ctx.outputs[0].shape;
    sa_ = broadcast_strides(ctx.inputs[0].shape, out_);
    sb_ = broadcast_strides(ctx.inputs[1].shape, out_);
    dtype_ = ctx.outputs[0].dtype;
    return Status::ok();
  }
  template <class T>
  void run(const T* a, const T* b, T* y) const {
    const int64_t n = shape_numel(out_);
    std::vector<int64_t> idx(out_.size(), 0);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < n; ++i) {
      y[i] = binary_forward(op_, a[oa], b[ob]);
      for (int64_t d = static_cast<int64_t>(out_.size()) - 1; d >= 0; --d) {
        oa += sa_[d];
        ob += sb_[d];
        if (++idx[d] < out_[d]) break;
        oa -= sa_[d] * out_[d];
        ob -= sb_[d] * out_[d];
        idx[d] = 0;
      }
    }
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dtype_ == DType::kF32) run(src[0]->f32(), src[1]->f32(), dst[0]->f32());
    else if (dtype_ == DType::kF64)
      run(static_cast<const double*>(src[0]->data()), static_cast<const double*>(src[1]->data()),
          static_cast<double*>(dst[0]->data()));
    else run(src[0]->i64(), src[1]->i64(), dst[0]->i64());
    return Status::ok();
  }
  bool has_backward() const override { return dtype_ == DType::kF32; }
  bool backward_reads_input(size_t) const override { return binary_info(op_).backward_reads_inputs; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Each operand's gradient is summed over the axes it was broadcast along.
  Status backward(const BackwardArgs& g) override {
    const float* a = g.src[0]->f32();
    const float* b = g.src[1]->f32();
    const float* dy = g.diff_dst[0]->f32();
    float* da = zeroed_grad(g, 0);
    float* db = zeroed_grad(g, 1);
    const int64_t n = shape_numel(out_);
    std::vector<int64_t> idx(out_.size(), 0);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float gy = dy[i];
      if (da) da[oa] += binary_grad_a(op_, gy, a[oa], b[ob]);
      if (db) db[ob] += binary_grad_b(op_, gy, a[oa], b[ob]);
      for (int64_t d = static_cast<int64_t>(out_.size()) - 1; d >= 0; --d) {
        oa += sa_[d];
        ob += sb_[d];
        if (++idx[d] < out_[d]) break;
        oa -= sa_[d] * out_[d];
        ob -= sb_[d] * out_[d];
        idx[d] = 0;
      }
    }
    return Status::ok();
  }

 private:
  BinaryOp op_ = BinaryOp::kAdd;
  Shape out_;
  std::vector<int64_t> sa_, sb_;
  DType dtype_ = DType::kF32;
};

class UnaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto op = unary_op_of(ctx.node->op_type);
    if (!op) return Status::internal(ctx.node->label() + ": not an element-wise activation");
    op_ = *op;
    args_ = unary_args(op_, ctx);
    int64_ = ctx.inputs[0].dtype == DType::kI64;
    float64_ = ctx.inputs[0].dtype == DType::kF64;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (int64_) {
      for (int64_t i = 0; i < src[0]->numel(); ++i) dst[0]->i64()[i] = unary_forward_i64(op_, src[0]->i64()[i]);
      return Status::ok();
    }
    if (float64_) {  // the row's formula is in double: float64 in its own width
      const auto* x = static_cast<const double*>(src[0]->data());
      auto* y = static_cast<double*>(dst[0]->data());
      UnaryArgs args = args_;
      if (src.size() > 1 && src[1]) args.lo = src[1]->get(0);
      if (src.size() > 2 && src[2]) args.hi = src[2]->get(0);
      for (int64_t i = 0; i < src[0]->numel(); ++i) y[i] = unary_info(op_).f(x[i], args);
      return Status::ok();
    }
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    const int64_t n = src[0]->numel();
    UnaryArgs args = args_;  // runtime Clip bounds override the load-time ones
    if (src.size() > 1 && src[1]) args.lo = src[1]->f32()[0];
    if (src.size() > 2 && src[2]) args.hi = src[2]->f32()[0];
    for (int64_t i = 0; i < n; ++i) y[i] = unary_forward(op_, x[i], args);
    return Status::ok();
  }

  bool has_backward() const override { return !int64_ && !float64_; }
  bool backward_reads_input(size_t i) const override { return i > 0 || unary_info(op_).backward_reads_input; }
  bool backward_reads_output(size_t) const override { return unary_info(op_).backward_reads_output; }
  /// unary_derivative: PyTorch's conventions at kinks.
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = zeroed_grad(a, 0);
    zeroed_grad(a, 1);
    zeroed_grad(a, 2);
    if (!dx) return Status::ok();
    const int64_t n = a.src[0]->numel();
    UnaryArgs args = args_;
    if (a.src.size() > 1 && a.src[1]) args.lo = a.src[1]->f32()[0];
    if (a.src.size() > 2 && a.src[2]) args.hi = a.src[2]->f32()[0];
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * unary_derivative(op_, x[i], y[i], args);
    return Status::ok();
  }

 private:
  UnaryOp op_ = UnaryOp::kRelu;
  UnaryArgs args_;
  bool int64_ = false, float64_ = false;
};

}  // namespace

void add_eltwise_kernels(BackendRegistration& r) {
  // float64 in its own width (the rows' formulas are in double); float16, bfloat16 and the
  // narrow integers widened (core/promote.hpp).
  const KernelTraits f64{LayoutUse::kNone, nullptr, kBaseDTypes | dtype_bit(DType::kF64)};
  for (const auto& b : kBinaryOps) r.kernel(b.name, make_factory<BinaryKernel>(), f64);
  for (const auto& u : kUnaryOps) r.kernel(u.name, make_factory<UnaryKernel>(), f64);
}

}  // namespace mosaic::naive_impl
