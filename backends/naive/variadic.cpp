// The naive oracle's variadic element-wise ops: Sum, Mean, Max and Min of any number of
// operands with numpy broadcasting. Backward: Sum passes the gradient to every operand,
// Mean a 1/n share, Max and Min to the operands equal to the result, split evenly between
// ties (torch.maximum's rule); each summed over the axes its operand was broadcast along.
#include <algorithm>
#include <cmath>

#include "backends/common/broadcast.hpp"
#include "backends/naive/naive_internal.hpp"

namespace mosaic::naive_impl {
namespace {

class VariadicKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const std::string& op = ctx.node->op_type;
    if (op == "Sum") kind_ = Kind::kSum;
    else if (op == "Mean") kind_ = Kind::kMean;
    else if (op == "Max") kind_ = Kind::kMax;
    else if (op == "Min") kind_ = Kind::kMin;
    else return Status::internal(ctx.node->label() + ": not a variadic op (Sum, Mean, Max, Min)");
    out_ = ctx.outputs[0].shape;
    for (const auto& in : ctx.inputs) strides_.push_back(broadcast_strides(in.shape, out_));
    int64_ = ctx.outputs[0].dtype == DType::kI64;
    return Status::ok();
  }
  /// f(i, offsets): output element i and the element of each operand it reads.
  template <class F>
  void each(F&& f) const {
    const int64_t n = shape_numel(out_);
    std::vector<int64_t> idx(out_.size(), 0), off(strides_.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
      f(i, off);
      for (int64_t d = static_cast<int64_t>(out_.size()) - 1; d >= 0; --d) {
        for (size_t k = 0; k < off.size(); ++k) off[k] += strides_[k][d];
        if (++idx[d] < out_[d]) break;
        for (size_t k = 0; k < off.size(); ++k) off[k] -= strides_[k][d] * out_[d];
        idx[d] = 0;
      }
    }
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (int64_) {  // Max and Min of int64, exactly
      each([&](int64_t i, const std::vector<int64_t>& o) {
        int64_t acc = src[0]->i64()[o[0]];
        for (size_t k = 1; k < src.size(); ++k)
          acc = kind_ == Kind::kMax ? std::max(acc, src[k]->i64()[o[k]]) : std::min(acc, src[k]->i64()[o[k]]);
        dst[0]->i64()[i] = acc;
      });
      return Status::ok();
    }
    float* y = dst[0]->f32();
    const double n = static_cast<double>(src.size());
    each([&](int64_t i, const std::vector<int64_t>& o) {
      double acc = src[0]->f32()[o[0]];
      for (size_t k = 1; k < src.size(); ++k) {
        const double v = src[k]->f32()[o[k]];
        acc = kind_ == Kind::kMax ? std::fmax(acc, v) : kind_ == Kind::kMin ? std::fmin(acc, v) : acc + v;
      }
      y[i] = static_cast<float>(kind_ == Kind::kMean ? acc / n : acc);
    });
    return Status::ok();
  }
  bool has_backward() const override { return !int64_; }
  bool backward_reads_input(size_t) const override { return kind_ == Kind::kMax || kind_ == Kind::kMin; }
  bool backward_reads_output(size_t) const override { return kind_ == Kind::kMax || kind_ == Kind::kMin; }
  Status backward(const BackwardArgs& a) override {
    std::vector<float*> dx;
    for (size_t k = 0; k < a.src.size(); ++k) dx.push_back(zeroed_grad(a, k));
    const float* dy = a.diff_dst[0]->f32();
    const bool selects = kind_ == Kind::kMax || kind_ == Kind::kMin;
    const float* y = selects ? a.dst[0]->f32() : nullptr;
    const double share = kind_ == Kind::kMean ? 1.0 / static_cast<double>(a.src.size()) : 1.0;
    each([&](int64_t i, const std::vector<int64_t>& o) {
      int ties = 0;
      if (selects)
        for (size_t k = 0; k < o.size(); ++k) ties += a.src[k]->f32()[o[k]] == y[i];
      for (size_t k = 0; k < o.size(); ++k) {
        if (!dx[k]) continue;
        if (!selects) dx[k][o[k]] += static_cast<float>(dy[i] * share);
        else if (a.src[k]->f32()[o[k]] == y[i]) dx[k][o[k]] += dy[i] / static_cast<float>(ties);
      }
    });
    return Status::ok();
  }

 private:
  enum class Kind { kSum, kMean, kMax, kMin } kind_ = Kind::kSum;
  bool int64_ = false;
  Shape out_;
  std::vector<std::vector<int64_t>> strides_;
};

}  // namespace

void add_variadic_kernels(BackendRegistration& r) {
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) r.kernel(op, make_factory<VariadicKernel>());
}

}  // namespace mosaic::naive_impl
