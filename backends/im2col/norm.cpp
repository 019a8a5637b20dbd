// The im2col backend's normalisation with Eigen: softmax and log-softmax, batch normalisation, LRN.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/common/grad.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {
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
    using Strided = Eigen::Map<const Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
    using StridedOut = Eigen::Map<Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        Strided v(x + base, p_.axis_dim, Eigen::InnerStride<>(p_.inner));
        StridedOut out(y + base, p_.axis_dim, Eigen::InnerStride<>(p_.inner));
        const float mx = v.maxCoeff();
        Eigen::ArrayXf e = (v - mx).exp();
        const float sum = e.sum();
        if (log_) out = v - mx - std::log(sum);
        else out = e / sum;
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  /// Softmax: dx = y (dy - sum dy y); LogSoftmax: dx = dy - exp(y) sum dy.
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    using Strided = Eigen::Map<const Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
    using StridedOut = Eigen::Map<Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        const Eigen::InnerStride<> st(p_.inner);
        Strided yv(y + base, p_.axis_dim, st), g(dy + base, p_.axis_dim, st);
        StridedOut out(dx + base, p_.axis_dim, st);
        if (log_) out = g - yv.exp() * g.sum();
        else out = yv * (g - (g * yv).sum());
      }
    return Status::ok();
  }

 private:
  SoftmaxParams p_;
  bool log_ = false;
};

class BatchNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    training_ = ctx.training;
    p_ = batch_norm_params(*ctx.node, ctx.inputs[0].shape);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t ch = p_.channels;
    ConstArrayMap scale(src[1]->f32(), ch), b(src[2]->f32(), ch), mean(src[3]->f32(), ch), var(src[4]->f32(), ch);
    Eigen::ArrayXf mul, add;
    if (training_) {
      batch_statistics(src[0]->f32(), const_cast<float*>(src[3]->f32()), const_cast<float*>(src[4]->f32()));
      mul = scale * invstd_.cast<float>();
      add = b - mean_.cast<float>() * mul;
    } else {
      mul = scale / (var + p_.epsilon).sqrt();
      add = b - mean * mul;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < p_.batch; ++n)
      for (int64_t c = 0; c < p_.channels; ++c) {
        const int64_t o = (n * p_.channels + c) * p_.spatial;
        ArrayMap(dst[0]->f32() + o, p_.spatial) = ConstArrayMap(src[0]->f32() + o, p_.spatial) * mul[c] + add[c];
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// Training: through the batch statistics, dx = invstd / M (M g - sum g - xhat sum(g xhat))
  /// with g = dy scale; inference: dx = dy scale / sqrt(var + eps). dscale = sum dy xhat,
  /// dB = sum dy. Running statistics get no gradient.
  Status backward(const BackwardArgs& a) override {
    const float *x = a.src[0]->f32(), *scale = a.src[1]->f32(), *dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0] ? a.diff_src[0]->f32() : nullptr;
    float* dscale = a.diff_src.size() > 1 && a.diff_src[1] ? a.diff_src[1]->f32() : nullptr;
    float* dshift = a.diff_src.size() > 2 && a.diff_src[2] ? a.diff_src[2]->f32() : nullptr;
    for (size_t i = 3; i < a.diff_src.size(); ++i)
      zeroed_grad(a, i);
    const float* rmean = a.src[3]->f32();
    const float* rvar = a.src[4]->f32();
    const double m = static_cast<double>(p_.batch * p_.spatial);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < p_.channels; ++c) {
      const double mean = training_ ? mean_[c] : rmean[c];
      const double inv = training_ ? invstd_[c] : 1.0 / std::sqrt(static_cast<double>(rvar[c]) + p_.epsilon);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < p_.batch; ++n) {
        const int64_t o = (n * p_.channels + c) * p_.spatial;
        for (int64_t i = 0; i < p_.spatial; ++i) {
          sum_dy += dy[o + i];
          sum_dy_xhat += dy[o + i] * ((x[o + i] - mean) * inv);
        }
      }
      if (dscale) dscale[c] = static_cast<float>(sum_dy_xhat);
      if (dshift) dshift[c] = static_cast<float>(sum_dy);
      if (!dx) continue;
      const double k = scale[c] * inv;
      for (int64_t n = 0; n < p_.batch; ++n) {
        const int64_t o = (n * p_.channels + c) * p_.spatial;
        for (int64_t i = 0; i < p_.spatial; ++i) {
          if (!training_) {
            dx[o + i] = static_cast<float>(dy[o + i] * k);
            continue;
          }
          const double xhat = (x[o + i] - mean) * inv;
          dx[o + i] = static_cast<float>(k / m * (m * dy[o + i] - sum_dy - xhat * sum_dy_xhat));
        }
      }
    }
    return Status::ok();
  }

 private:
  void batch_statistics(const float* x, float* running_mean, float* running_var) {
    mean_.resize(p_.channels);
    invstd_.resize(p_.channels);
    batch_norm_statistics(x, p_.batch, p_.channels, p_.spatial, p_.epsilon, p_.momentum, mean_.data(), invstd_.data(), running_mean, running_var);
  }

  bool training_ = false;
  BatchNormParams p_;
  Eigen::ArrayXd mean_, invstd_;
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
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        Eigen::ArrayXf sq = Eigen::ArrayXf::Zero(sp_);
        for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j)
          sq += ConstArrayMap(src[0]->f32() + (n * c_ + j) * sp_, sp_).square();
        const int64_t o = (n * c_ + c) * sp_;
        ArrayMap(dst[0]->f32() + o, sp_) =
            ConstArrayMap(src[0]->f32() + o, sp_) / (p_.bias + (p_.alpha / p_.size) * sq).pow(p_.beta);
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// y_c = x_c s_c^-beta with s_c = bias + alpha/size sum_{j in win(c)} x_j^2:
  /// dx_i = dy_i s_i^-beta - 2 alpha beta / size x_i sum_{c: i in win(c)} dy_c y_c / s_c.
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float *x = a.src[0]->f32(), *y = a.dst[0]->f32(), *dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
    const float k = p_.alpha / static_cast<float>(p_.size);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < n_; ++n) {
      // s for every channel of this image, then t_c = dy_c y_c / s_c.
      Eigen::ArrayXXf s(sp_, c_), t(sp_, c_);
      for (int64_t c = 0; c < c_; ++c) {
        Eigen::ArrayXf sq = Eigen::ArrayXf::Zero(sp_);
        for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j)
          sq += ConstArrayMap(x + (n * c_ + j) * sp_, sp_).square();
        s.col(c) = p_.bias + k * sq;
        const int64_t o = (n * c_ + c) * sp_;
        t.col(c) = ConstArrayMap(dy + o, sp_) * ConstArrayMap(y + o, sp_) / s.col(c);
      }
      for (int64_t i = 0; i < c_; ++i) {
        // Channels c whose window holds i: c - lo <= i <= c + hi, i.e. c in [i - hi, i + lo].
        Eigen::ArrayXf acc = Eigen::ArrayXf::Zero(sp_);
        for (int64_t c = std::max<int64_t>(0, i - hi); c <= std::min(c_ - 1, i + lo); ++c) acc += t.col(c);
        const int64_t o = (n * c_ + i) * sp_;
        ArrayMap(dx + o, sp_) = ConstArrayMap(dy + o, sp_) * s.col(i).pow(-p_.beta) -
                                2.f * k * p_.beta * ConstArrayMap(x + o, sp_) * acc;
      }
    }
    return Status::ok();
  }

 private:
  LrnParams p_;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
};

}  // namespace

void add_norm_kernels(BackendRegistration& r) {
  r.kernel("Softmax", make_factory<SoftmaxKernel>());
  r.kernel("LogSoftmax", make_factory<SoftmaxKernel>());
  r.kernel("BatchNormalization", make_factory<BatchNormKernel>());
  r.kernel("LRN", make_factory<LrnKernel>());
}

}  // namespace mosaic::im2col_impl
