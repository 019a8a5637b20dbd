// The naive oracle's Range (a sequence; usually folded at load) and Trilu (a triangle of each matrix, as causal
// attention masks are built; backward masks the gradient the same way).
#include <cstring>

#include "backends/naive/naive_internal.hpp"

namespace mosaic::naive_impl {
namespace {

class RangeKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dst[0]->dtype() == DType::kI64) {  // exact: every element lies between start and limit
      const int64_t start = src[0]->i64()[0], delta = src[2]->i64()[0];
      for (int64_t i = 0; i < dst[0]->numel(); ++i)
        dst[0]->i64()[i] = static_cast<int64_t>(static_cast<__int128>(start) + static_cast<__int128>(i) * delta);
      return Status::ok();
    }
    const double start = src[0]->get(0), delta = src[2]->get(0);
    for (int64_t i = 0; i < dst[0]->numel(); ++i)
      dst[0]->f32()[i] = static_cast<float>(start + static_cast<double>(i) * delta);
    return Status::ok();
  }
};

class TriluKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Shape& x = ctx.inputs[0].shape;
    rows_ = x[x.size() - 2];
    cols_ = x[x.size() - 1];
    upper_ = ctx.node->attr_int("upper", 1) != 0;
    if (ctx.has_input(1)) k_ = ctx.constant(1)->to_i64_vector().at(0);
    dtype_ = ctx.inputs[0].dtype;
    return Status::ok();
  }
  bool keep(int64_t i, int64_t j) const { return upper_ ? j - i >= k_ : j - i <= k_; }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t bytes = dtype_size(dtype_);
    const auto* x = static_cast<const uint8_t*>(src[0]->data());
    auto* y = static_cast<uint8_t*>(dst[0]->data());
    const int64_t n = src[0]->numel();
    for (int64_t e = 0; e < n; ++e) {
      const int64_t i = e / cols_ % rows_, j = e % cols_;
      if (keep(i, j)) std::memcpy(y + e * bytes, x + e * bytes, bytes);
      else std::memset(y + e * bytes, 0, bytes);
    }
    return Status::ok();
  }
  bool has_backward() const override { return dtype_ == DType::kF32; }
  bool backward_reads_input(size_t i) const override { return i == 1; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    for (int64_t e = 0; e < a.diff_src[0]->numel(); ++e) dx[e] = keep(e / cols_ % rows_, e % cols_) ? dy[e] : 0.f;
    return Status::ok();
  }

 private:
  int64_t rows_ = 1, cols_ = 1, k_ = 0;
  bool upper_ = true;
  DType dtype_ = DType::kF32;
};

}  // namespace

void add_shape_op_kernels(BackendRegistration& r) {
  r.kernel("Range", make_factory<RangeKernel>());
  r.kernel("Trilu", make_factory<TriluKernel>());
}

}  // namespace mosaic::naive_impl
