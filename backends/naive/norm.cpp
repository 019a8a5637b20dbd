// The naive oracle's normalisation: softmax and log-softmax, batch normalisation, LRN, forward and
// backward; instance, RMS, Lp and mean-variance normalisation and Hardmax, forward.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/common/grad.hpp"
#include "backends/common/layer_norm.hpp"
#include "backends/naive/naive_internal.hpp"
#include "operators/normalization.hpp"

namespace mosaic::naive_impl {
namespace {

class SoftmaxKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, softmax_params(ctx));
    log_ = ctx.node->op_type == "LogSoftmax";
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t a = 0; a < p_.axis_dim; ++a) mx = std::max(mx, x[base + a * p_.inner]);
        double sum = 0;
        for (int64_t a = 0; a < p_.axis_dim; ++a) sum += std::exp(static_cast<double>(x[base + a * p_.inner] - mx));
        for (int64_t a = 0; a < p_.axis_dim; ++a) {
          const float v = x[base + a * p_.inner] - mx;
          y[base + a * p_.inner] = log_ ? static_cast<float>(v - std::log(sum)) : static_cast<float>(std::exp(v) / sum);
        }
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  /// Softmax: dx = y (dy - sum(dy y)); LogSoftmax: dx = dy - exp(y) sum(dy).
  Status backward(const BackwardArgs& a) override {
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = zeroed_grad(a, 0);
    if (!dx) return Status::ok();
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        double sum = 0;
        for (int64_t k = 0; k < p_.axis_dim; ++k) {
          const int64_t i = base + k * p_.inner;
          sum += log_ ? dy[i] : static_cast<double>(dy[i]) * y[i];
        }
        for (int64_t k = 0; k < p_.axis_dim; ++k) {
          const int64_t i = base + k * p_.inner;
          dx[i] = log_ ? static_cast<float>(dy[i] - std::exp(y[i]) * sum) : static_cast<float>(y[i] * (dy[i] - sum));
        }
      }
    return Status::ok();
  }

 private:
  SoftmaxParams p_;
  bool log_ = false;
};

/// Inference: normalise with the given statistics. Training (as PyTorch's model.train()):
/// normalise with the batch's mean and biased variance, and update the running statistics
/// in place: running = momentum * running + (1 - momentum) * batch (ONNX's momentum, i.e.
/// 1 - PyTorch's), the running variance with the unbiased batch variance (PyTorch's rule).
class BatchNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    training_ = ctx.training;
    p_ = batch_norm_params(*ctx.node, ctx.inputs[0].shape);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float *x = src[0]->f32(), *scale = src[1]->f32(), *b = src[2]->f32(), *mean = src[3]->f32(),
                *var = src[4]->f32();
    float* y = dst[0]->f32();
    if (training_) return forward_training(x, scale, b, const_cast<float*>(mean), const_cast<float*>(var), y);
    for (int64_t n = 0; n < p_.batch; ++n)
      for (int64_t c = 0; c < p_.channels; ++c) {
        const float inv = 1.f / std::sqrt(var[c] + p_.epsilon);
        for (int64_t i = 0; i < p_.spatial; ++i) {
          const int64_t o = (n * p_.channels + c) * p_.spatial + i;
          y[o] = scale[c] * (x[o] - mean[c]) * inv + b[c];
        }
      }
    return Status::ok();
  }

  Status forward_training(const float* x, const float* scale, const float* b, float* running_mean,
                          float* running_var, float* y) {
    batch_mean_.assign(static_cast<size_t>(p_.channels), 0.0);
    batch_invstd_.assign(static_cast<size_t>(p_.channels), 0.0);
    batch_norm_statistics(x, p_.batch, p_.channels, p_.spatial, p_.epsilon, p_.momentum, batch_mean_.data(), batch_invstd_.data(), running_mean,
                          running_var);
    for (int64_t c = 0; c < p_.channels; ++c) {
      const double mean = batch_mean_[c];
      for (int64_t n = 0; n < p_.batch; ++n)
        for (int64_t i = 0; i < p_.spatial; ++i) {
          const int64_t o = (n * p_.channels + c) * p_.spatial + i;
          y[o] = static_cast<float>(scale[c] * (x[o] - mean) * batch_invstd_[c] + b[c]);
        }
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// With the given (running) statistics: dx = dy scale / sqrt(var + eps),
  /// dscale = sum dy (x - mean) / sqrt(var + eps), dB = sum dy.
  Status backward(const BackwardArgs& a) override {
    if (training_) return backward_training(a);
    const float *x = a.src[0]->f32(), *scale = a.src[1]->f32(), *mean = a.src[3]->f32(), *var = a.src[4]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = zeroed_grad(a, 0);
    float* dscale = zeroed_grad(a, 1);
    float* dshift = zeroed_grad(a, 2);
    zeroed_grad(a, 3);
    zeroed_grad(a, 4);
    for (int64_t n = 0; n < p_.batch; ++n)
      for (int64_t c = 0; c < p_.channels; ++c) {
        const float inv = 1.f / std::sqrt(var[c] + p_.epsilon);
        for (int64_t i = 0; i < p_.spatial; ++i) {
          const int64_t o = (n * p_.channels + c) * p_.spatial + i;
          if (dx) dx[o] = dy[o] * scale[c] * inv;
          if (dscale) dscale[c] += dy[o] * (x[o] - mean[c]) * inv;
          if (dshift) dshift[c] += dy[o];
        }
      }
    return Status::ok();
  }

  /// Through the batch statistics: with xhat = (x - mean) invstd over M = N x spatial,
  /// dx = invstd / M (M g - sum g - xhat sum(g xhat)) where g = dy scale;
  /// dscale = sum dy xhat, dB = sum dy.
  Status backward_training(const BackwardArgs& a) {
    const float *x = a.src[0]->f32(), *scale = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = zeroed_grad(a, 0);
    float* dscale = zeroed_grad(a, 1);
    float* dshift = zeroed_grad(a, 2);
    zeroed_grad(a, 3);
    zeroed_grad(a, 4);
    const double m = static_cast<double>(p_.batch * p_.spatial);
    for (int64_t c = 0; c < p_.channels; ++c) {
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < p_.batch; ++n)
        for (int64_t i = 0; i < p_.spatial; ++i) {
          const int64_t o = (n * p_.channels + c) * p_.spatial + i;
          const double xhat = (x[o] - batch_mean_[c]) * batch_invstd_[c];
          sum_dy += dy[o];
          sum_dy_xhat += dy[o] * xhat;
        }
      if (dscale) dscale[c] = static_cast<float>(sum_dy_xhat);
      if (dshift) dshift[c] = static_cast<float>(sum_dy);
      if (!dx) continue;
      for (int64_t n = 0; n < p_.batch; ++n)
        for (int64_t i = 0; i < p_.spatial; ++i) {
          const int64_t o = (n * p_.channels + c) * p_.spatial + i;
          const double xhat = (x[o] - batch_mean_[c]) * batch_invstd_[c];
          dx[o] = static_cast<float>(scale[c] * batch_invstd_[c] / m * (m * dy[o] - sum_dy - xhat * sum_dy_xhat));
        }
    }
    return Status::ok();
  }

 private:
  bool training_ = false;
  BatchNormParams p_;
  std::vector<double> batch_mean_, batch_invstd_;
};

class LrnKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, lrn_params(ctx));
    const Shape& x = ctx.inputs[0].shape;
    n_ = x[0];
    c_ = x[1];
    sp_ = shape_numel(x) / std::max<int64_t>(n_ * c_, 1);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;  // [c - floor, c + ceil]
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c)
        for (int64_t i = 0; i < sp_; ++i) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j) {
            const float v = x[(n * c_ + j) * sp_ + i];
            sq += static_cast<double>(v) * v;
          }
          const int64_t o = (n * c_ + c) * sp_ + i;
          y[o] = static_cast<float>(x[o] / std::pow(p_.bias + p_.alpha / p_.size * sq, p_.beta));
        }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// y_c = x_c s_c^-b with s_c = bias + a/size sum_{j in W(c)} x_j^2, so
  /// dx_j = dy_j s_j^-b - (2 a b / size) x_j sum_{c: j in W(c)} dy_c x_c s_c^(-b-1).
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = zeroed_grad(a, 0);
    if (!dx) return Status::ok();
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
    std::vector<double> s(static_cast<size_t>(c_));
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t i = 0; i < sp_; ++i) {
        auto at = [&](int64_t c) { return (n * c_ + c) * sp_ + i; };
        for (int64_t c = 0; c < c_; ++c) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j)
            sq += static_cast<double>(x[at(j)]) * x[at(j)];
          s[c] = p_.bias + p_.alpha / p_.size * sq;
        }
        for (int64_t j = 0; j < c_; ++j) {
          double acc = 0;
          // Channels c whose window [c - lo, c + hi] contains j.
          for (int64_t c = std::max<int64_t>(0, j - hi); c <= std::min(c_ - 1, j + lo); ++c)
            acc += dy[at(c)] * x[at(c)] * std::pow(s[c], -p_.beta - 1);
          dx[at(j)] = static_cast<float>(dy[at(j)] * std::pow(s[j], -p_.beta) -
                                         2.0 * p_.alpha * p_.beta / p_.size * x[at(j)] * acc);
        }
      }
    return Status::ok();
  }

 private:
  LrnParams p_;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
};

}  // namespace

/// Hardmax: 1 at the first largest element along the axis (softmax_params' axis), 0 elsewhere.
class HardmaxKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, softmax_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    std::fill(y, y + dst[0]->numel(), 0.f);
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        int64_t best = 0;
        for (int64_t a = 1; a < p_.axis_dim; ++a)
          if (x[base + a * p_.inner] > x[base + best * p_.inner]) best = a;
        if (p_.axis_dim > 0) y[base + best * p_.inner] = 1.f;
      }
    return Status::ok();
  }

 private:
  SoftmaxParams p_;
};

class LpNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, lp_norm_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        double norm = 0;
        for (int64_t a = 0; a < p_.axis_dim; ++a) {
          const double v = x[base + a * p_.inner];
          norm += p_.p == 1 ? std::fabs(v) : v * v;
        }
        if (p_.p == 2) norm = std::sqrt(norm);
        for (int64_t a = 0; a < p_.axis_dim; ++a)
          y[base + a * p_.inner] = norm == 0 ? 0.f : static_cast<float>(x[base + a * p_.inner] / norm);
      }
    return Status::ok();
  }

 private:
  LpNormParams p_;
};

/// MeanVarianceNormalization: each group (the elements that agree on every axis not
/// normalised over) to (x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9), ONNX's function body.
class MvnKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(MvnParams p, mvn_params(ctx));
    const Shape& x = ctx.inputs[0].shape;
    // Each element's group: its index over the kept axes, row-major.
    group_.resize(static_cast<size_t>(shape_numel(x)));
    groups_ = 1;
    for (size_t d = 0; d < x.size(); ++d)
      if (!p.reduced[d]) groups_ *= x[d];
    std::vector<int64_t> idx(x.size(), 0);
    for (size_t e = 0; e < group_.size(); ++e) {
      int64_t g = 0;
      for (size_t d = 0; d < x.size(); ++d)
        if (!p.reduced[d]) g = g * x[d] + idx[d];
      group_[e] = g;
      for (size_t d = x.size(); d-- > 0;) {
        if (++idx[d] < x[d]) break;
        idx[d] = 0;
      }
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    std::vector<double> sum(static_cast<size_t>(groups_), 0.0), sq(static_cast<size_t>(groups_), 0.0);
    std::vector<int64_t> count(static_cast<size_t>(groups_), 0);
    for (size_t e = 0; e < group_.size(); ++e) {
      const auto g = static_cast<size_t>(group_[e]);
      sum[g] += x[e];
      sq[g] += static_cast<double>(x[e]) * x[e];
      ++count[g];
    }
    for (size_t e = 0; e < group_.size(); ++e) {
      const auto g = static_cast<size_t>(group_[e]);
      const double mean = sum[g] / static_cast<double>(count[g]);
      const double var = std::max(0.0, sq[g] / static_cast<double>(count[g]) - mean * mean);
      y[e] = static_cast<float>((x[e] - mean) / (std::sqrt(var) + 1e-9));
    }
    return Status::ok();
  }

 private:
  std::vector<int64_t> group_;
  int64_t groups_ = 1;
};

void add_norm_kernels(BackendRegistration& r) {
  r.kernel("Hardmax", make_factory<HardmaxKernel>());
  r.kernel("LpNormalization", make_factory<LpNormKernel>());
  r.kernel("MeanVarianceNormalization", make_factory<MvnKernel>());
  add_rms_norm_loop_kernel(r);    // the shared loops (common/layer_norm.hpp)
  add_group_norm_loop_kernel(r);  // InstanceNormalization and GroupNormalization
  r.kernel("Softmax", make_factory<SoftmaxKernel>());
  r.kernel("LogSoftmax", make_factory<SoftmaxKernel>());
  r.kernel("BatchNormalization", make_factory<BatchNormKernel>());
  r.kernel("LRN", make_factory<LrnKernel>());
}

}  // namespace mosaic::naive_impl
