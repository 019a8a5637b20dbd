#include "backends/common/resize.hpp"

#include "operators/resize.hpp"

namespace mosaic {
namespace {

class ResizeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, resize_params(ctx));
    for (size_t a = 0; a < p_.in.size(); ++a)
      if (!resize_axis_identity(p_, a)) axes_.push_back({a, resize_axis_taps(p_, a)});
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    Shape shape = p_.in;
    std::vector<double> cur(x, x + src[0]->numel()), next;
    for (const auto& [a, t] : axes_) {
      int64_t outer = 1, inner = 1;
      for (size_t d = 0; d < shape.size(); ++d) {
        if (d < a) outer *= shape[d];
        else if (d > a) inner *= shape[d];
      }
      const int64_t in = shape[a], out = p_.out[a];
      next.assign(static_cast<size_t>(outer * out * inner), 0.0);
      for (int64_t b = 0; b < outer; ++b)
        for (int64_t o = 0; o < out; ++o) {
          double* y = next.data() + (b * out + o) * inner;
          if (t.outside[o]) {
            std::fill(y, y + inner, p_.extrapolation);
            continue;
          }
          for (int64_t k = 0; k < t.taps; ++k) {
            const double w = t.weight[o * t.taps + k];
            if (w == 0) continue;
            const double* from = cur.data() + (b * in + t.index[o * t.taps + k]) * inner;
            for (int64_t i = 0; i < inner; ++i) y[i] += w * from[i];
          }
        }
      shape[a] = out;
      cur.swap(next);
    }
    float* y = dst[0]->f32();
    for (size_t i = 0; i < cur.size(); ++i) y[i] = static_cast<float>(cur[i]);
    return Status::ok();
  }

 private:
  ResizeParams p_;
  std::vector<std::pair<size_t, ResizeTaps>> axes_;
};

}  // namespace

void add_resize_kernel(BackendRegistration& r) {
  r.kernel("Resize", make_factory<ResizeKernel>());
  r.kernel("Upsample", make_factory<ResizeKernel>());  // Resize 10's rules (operators/resize.cpp)
}

}  // namespace mosaic
