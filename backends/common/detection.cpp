#include "backends/common/detection.hpp"

#include <algorithm>
#include <cmath>

#include "operators/detection.hpp"

namespace mosaic {

Status output_length_changed(const Node& n, int64_t planned, int64_t now, const char* what) {
  return Status::invalid(n.label() + ": " + what + " " + std::to_string(now) + " where the plan was made for " +
                         std::to_string(planned) +
                         " (an output length that depends on input values; plan again with these inputs)");
}

namespace {

class NonZeroKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    shape_ = ctx.inputs[0].shape;
    if (shape_.empty()) shape_ = {1};
    planned_ = ctx.outputs[0].shape[1];
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const Tensor& x = *src[0];
    const int64_t count = count_nonzero(x);
    if (count != planned_) return output_length_changed(*node_, planned_, count, "it finds nonzero elements:");
    const auto rank = static_cast<int64_t>(shape_.size());
    int64_t* y = dst[0]->i64();
    int64_t k = 0;
    std::vector<int64_t> at(shape_.size(), 0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.get(i) != 0) {
        for (int64_t d = 0; d < rank; ++d) y[d * count + k] = at[static_cast<size_t>(d)];
        ++k;
      }
      for (int64_t d = rank - 1; d >= 0; --d) {  // the next coordinate, row-major
        if (++at[static_cast<size_t>(d)] < shape_[static_cast<size_t>(d)]) break;
        at[static_cast<size_t>(d)] = 0;
      }
    }
    return Status::ok();
  }

 private:
  const Node* node_ = nullptr;
  Shape shape_;
  int64_t planned_ = 0;
};

class NmsKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    MOSAIC_ASSIGN_OR_RETURN(p_, nms_shape_params(ctx));
    planned_ = ctx.outputs[0].shape[0];
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    auto scalar = [&](size_t i) { return i < src.size() ? src[i] : nullptr; };
    MOSAIC_ASSIGN_OR_RETURN(NmsParams p, nms_with_scalars(p_, *node_, scalar(2), scalar(3), scalar(4)));
    const std::vector<int64_t> sel = nms_select(p, src[0]->f32(), src[1]->f32());
    const auto count = static_cast<int64_t>(sel.size() / 3);
    if (count != planned_) return output_length_changed(*node_, planned_, count, "it keeps boxes:");
    std::copy(sel.begin(), sel.end(), dst[0]->i64());
    return Status::ok();
  }

 private:
  const Node* node_ = nullptr;
  NmsParams p_;
  int64_t planned_ = 0;
};

/// Samples per output element beyond which an adaptive grid (the roi's extent over the
/// output's) is refused: a hostile roi of 1e30 pixels must not hang the run.
constexpr int64_t kMaxRoiSamples = int64_t{1} << 16;

class RoiAlignKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    MOSAIC_ASSIGN_OR_RETURN(p_, roi_align_params(ctx));
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    const float* rois = src[1]->f32();
    const Tensor& batch = *src[2];
    float* y = dst[0]->f32();
    const double offset = p_.half_pixel ? 0.5 : 0.0;
    const int64_t plane = p_.h * p_.w, bins = p_.out_h * p_.out_w;
    for (int64_t r = 0; r < p_.rois; ++r) {
      const int64_t b = batch.get_i64(r);
      if (b < 0 || b >= p_.n)
        return Status::invalid(node_->label() + ": batch_indices[" + std::to_string(r) + "] = " + std::to_string(b) +
                               " is outside [0, " + std::to_string(p_.n) + ")");
      const float* roi = rois + r * 4;
      const double x0 = roi[0] * p_.spatial_scale - offset, y0 = roi[1] * p_.spatial_scale - offset;
      double rw = roi[2] * p_.spatial_scale - offset - x0, rh = roi[3] * p_.spatial_scale - offset - y0;
      if (!p_.half_pixel) {  // version 10: malformed rois become 1x1
        rw = std::max(rw, 1.0);
        rh = std::max(rh, 1.0);
      }
      if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(rw) || !std::isfinite(rh))
        return Status::invalid(node_->label() + ": roi " + std::to_string(r) + " is not finite");
      const double bin_h = rh / static_cast<double>(p_.out_h), bin_w = rw / static_cast<double>(p_.out_w);
      const double gh_d = p_.sampling_ratio > 0 ? static_cast<double>(p_.sampling_ratio) : std::max(0.0, std::ceil(bin_h));
      const double gw_d = p_.sampling_ratio > 0 ? static_cast<double>(p_.sampling_ratio) : std::max(0.0, std::ceil(bin_w));
      if (gh_d * gw_d > static_cast<double>(kMaxRoiSamples))
        return Status::invalid(node_->label() + ": roi " + std::to_string(r) + " would take " +
                               std::to_string(gh_d * gw_d) + " samples per output element (more than 2^16)");
      const auto gh = static_cast<int64_t>(gh_d), gw = static_cast<int64_t>(gw_d);
      const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
      // Per output bin: the taps and weights of its samples, shared by the channels.
      for (int64_t ph = 0; ph < p_.out_h; ++ph)
        for (int64_t pw = 0; pw < p_.out_w; ++pw) {
          taps_.clear();
          for (int64_t iy = 0; iy < gh; ++iy) {
            const double yy = y0 + static_cast<double>(ph) * bin_h + (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(gh);
            for (int64_t ix = 0; ix < gw; ++ix) {
              const double xx = x0 + static_cast<double>(pw) * bin_w + (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(gw);
              taps_.push_back(tap(yy, xx));
            }
          }
          const int64_t k = ph * p_.out_w + pw;
          float* out = y + r * p_.c * bins + k;
          const float* in = x + b * p_.c * plane;
          if (p_.max_mode) pool<true>(in, plane, out, bins, 1.0);
          else pool<false>(in, plane, out, bins, count);
        }
    }
    return Status::ok();
  }

 private:
  struct Tap {
    int64_t at[4] = {0, 0, 0, 0};
    double w[4] = {0, 0, 0, 0};
  };

  /// One bin of every channel from taps_: the mean of the samples, or (Max) ONNX's max, of
  /// the weighted taps of each sample.
  template <bool Max>
  void pool(const float* in, int64_t plane, float* out, int64_t stride, double count) const {
    const size_t n = taps_.size();
    for (int64_t ch = 0; ch < p_.c; ++ch, in += plane, out += stride) {
      double acc = 0;
      for (size_t s = 0; s < n; ++s) {
        const Tap& t = taps_[s];
        const double v0 = t.w[0] * in[t.at[0]], v1 = t.w[1] * in[t.at[1]];
        const double v2 = t.w[2] * in[t.at[2]], v3 = t.w[3] * in[t.at[3]];
        if constexpr (Max) {
          const double v = std::max(std::max(v0, v1), std::max(v2, v3));
          acc = s == 0 ? v : std::max(acc, v);
        } else {
          acc += v0 + v1 + v2 + v3;
        }
      }
      *out = static_cast<float>(Max ? acc : acc / count);
    }
  }

  /// Bilinear taps at (y, x): none (zero weights) outside [-1, H] x [-1, W], the edge
  /// clamped inside it.
  Tap tap(double y, double x) const {
    Tap t;
    if (y < -1.0 || y > static_cast<double>(p_.h) || x < -1.0 || x > static_cast<double>(p_.w)) return t;
    y = std::max(y, 0.0);
    x = std::max(x, 0.0);
    auto y_lo = static_cast<int64_t>(y), x_lo = static_cast<int64_t>(x);
    int64_t y_hi = y_lo + 1, x_hi = x_lo + 1;
    if (y_lo >= p_.h - 1) {
      y_hi = y_lo = p_.h - 1;
      y = static_cast<double>(y_lo);
    }
    if (x_lo >= p_.w - 1) {
      x_hi = x_lo = p_.w - 1;
      x = static_cast<double>(x_lo);
    }
    const double ly = y - static_cast<double>(y_lo), lx = x - static_cast<double>(x_lo);
    const double hy = 1 - ly, hx = 1 - lx;
    t.at[0] = y_lo * p_.w + x_lo;
    t.at[1] = y_lo * p_.w + x_hi;
    t.at[2] = y_hi * p_.w + x_lo;
    t.at[3] = y_hi * p_.w + x_hi;
    t.w[0] = hy * hx;
    t.w[1] = hy * lx;
    t.w[2] = ly * hx;
    t.w[3] = ly * lx;
    return t;
  }

  const Node* node_ = nullptr;
  RoiAlignParams p_;
  std::vector<Tap> taps_;
};

}  // namespace

void add_detection_kernels(BackendRegistration& r) {
  r.kernel("NonZero", make_factory<NonZeroKernel>(), {LayoutUse::kNone, {}, kAllDTypes});
  r.kernel("NonMaxSuppression", make_factory<NmsKernel>());
  r.kernel("RoiAlign", make_factory<RoiAlignKernel>());
}

}  // namespace mosaic
