#include "backends/common/einsum.hpp"

#include "operators/einsum.hpp"

namespace mosaic {
namespace {

class EinsumKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, einsum_params(ctx));
    int64_ = ctx.inputs[0].dtype == DType::kI64;
    float64_ = ctx.inputs[0].dtype == DType::kF64;
    // Per operand, each label's stride: the sum over the axes that carry it (a repeated
    // label walks the diagonal); a broadcast axis of extent 1 contributes nothing.
    const size_t labels = p_.extent.size();
    for (size_t i = 0; i < p_.operand.size(); ++i) {
      const Shape& s = ctx.inputs[i].shape;
      std::vector<int64_t> stride(labels, 0);
      int64_t step = 1;
      for (size_t a = s.size(); a-- > 0;) {
        if (s[a] != 1) stride[static_cast<size_t>(p_.operand[i][a])] += step;
        step *= s[a];
      }
      strides_.push_back(stride);
    }
    std::vector<bool> kept(labels, false);
    for (int l : p_.output) kept[static_cast<size_t>(l)] = true;
    for (size_t l = 0; l < labels; ++l)
      if (!kept[l]) summed_.push_back(static_cast<int>(l));
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t labels = p_.extent.size();
    std::vector<int64_t> idx(labels, 0);
    const int64_t outputs = shape_numel(p_.out);
    int64_t inner = 1;
    for (int l : summed_) inner *= p_.extent[static_cast<size_t>(l)];
    for (int64_t o = 0; o < outputs; ++o) {
      // The output index o, row-major over the output's labels.
      int64_t rest = o;
      for (size_t k = p_.output.size(); k-- > 0;) {
        const auto l = static_cast<size_t>(p_.output[k]);
        idx[l] = rest % p_.extent[l];
        rest /= p_.extent[l];
      }
      double acc = 0;
      uint64_t acc_i = 0;
      for (int64_t s = 0; s < inner; ++s) {
        int64_t r = s;
        for (size_t k = summed_.size(); k-- > 0;) {
          const auto l = static_cast<size_t>(summed_[k]);
          idx[l] = r % p_.extent[l];
          r /= p_.extent[l];
        }
        double prod = 1;
        uint64_t prod_i = 1;
        for (size_t i = 0; i < src.size(); ++i) {
          int64_t at = 0;
          for (size_t l = 0; l < labels; ++l) at += idx[l] * strides_[i][l];
          if (int64_) prod_i *= static_cast<uint64_t>(src[i]->i64()[at]);
          else if (float64_) prod *= static_cast<const double*>(src[i]->data())[at];
          else prod *= src[i]->f32()[at];
        }
        acc += prod;
        acc_i += prod_i;
      }
      if (int64_) dst[0]->i64()[o] = static_cast<int64_t>(acc_i);  // wraps, as ONNX's integers
      else if (float64_) static_cast<double*>(dst[0]->data())[o] = acc;
      else dst[0]->f32()[o] = static_cast<float>(acc);
    }
    return Status::ok();
  }

 private:
  EinsumParams p_;
  std::vector<std::vector<int64_t>> strides_;
  std::vector<int> summed_;
  bool int64_ = false, float64_ = false;
};

class DetKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, det_params(ctx));
    float64_ = ctx.inputs[0].dtype == DType::kF64;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t size = p_.order * p_.order;
    std::vector<double> a(static_cast<size_t>(size));
    for (int64_t k = 0; k < p_.matrices; ++k) {
      for (int64_t i = 0; i < size; ++i)
        a[static_cast<size_t>(i)] = float64_ ? static_cast<const double*>(src[0]->data())[k * size + i]
                                             : static_cast<double>(src[0]->f32()[k * size + i]);
      const double det = determinant_in_place(a.data(), p_.order);
      if (float64_) static_cast<double*>(dst[0]->data())[k] = det;
      else dst[0]->f32()[k] = static_cast<float>(det);
    }
    return Status::ok();
  }

 private:
  DetParams p_;
  bool float64_ = false;
};

}  // namespace

void add_einsum_det_kernels(BackendRegistration& r) {
  // float64 in its own width (double sums either way); the rest as KernelTraits' default.
  const KernelTraits wide{LayoutUse::kNone, nullptr, kBaseDTypes | dtype_bit(DType::kF64)};
  r.kernel("Einsum", make_factory<EinsumKernel>(), wide);
  r.kernel("Det", make_factory<DetKernel>(), wide);
}

}  // namespace mosaic
