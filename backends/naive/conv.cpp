// The naive oracle's convolutions: direct loops. Conv forward and backward (data, weights,
// bias); ConvTranspose, Col2Im and DeformConv forward.
#include "backends/common/grad.hpp"
#include "backends/naive/naive_internal.hpp"
#include "operators/conv_transpose.hpp"
#include "operators/deform_conv.hpp"

namespace mosaic::naive_impl {
namespace {

class ConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, conv_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift_window3(p_.win, *ctx.node));
    act_ = fused_activation(*ctx.node);
    node_ = ctx.node;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    const float* wt = src[1]->f32();
    const float* bias = p_.has_bias ? src[2]->f32() : nullptr;
    float* y = dst[0]->f32();
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group();
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    const int64_t ksz = w_.k[0] * w_.k[1] * w_.k[2];
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t oc = 0; oc < p_.oc; ++oc) {
        const int64_t g = oc / ocg;
        for (int64_t od = 0; od < w_.out[0]; ++od)
          for (int64_t oh = 0; oh < w_.out[1]; ++oh)
            for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
              double acc = bias ? bias[oc] : 0.0;  // the oracle sums in double
              for (int64_t ic = 0; ic < cg; ++ic) {
                const float* xc = x + (n * p_.c + g * cg + ic) * in_sp;
                const float* wc = wt + (oc * cg + ic) * ksz;
                for (int64_t kd = 0; kd < w_.k[0]; ++kd) {
                  int64_t id = od * w_.s[0] - w_.pb[0] + kd * w_.d[0];
                  if (id < 0 || id >= w_.in[0]) continue;
                  for (int64_t kh = 0; kh < w_.k[1]; ++kh) {
                    int64_t ih = oh * w_.s[1] - w_.pb[1] + kh * w_.d[1];
                    if (ih < 0 || ih >= w_.in[1]) continue;
                    for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
                      int64_t iw = ow * w_.s[2] - w_.pb[2] + kw * w_.d[2];
                      if (iw < 0 || iw >= w_.in[2]) continue;
                      acc += static_cast<double>(xc[(id * w_.in[1] + ih) * w_.in[2] + iw]) * wc[(kd * w_.k[1] + kh) * w_.k[2] + kw];
                    }
                  }
                }
              }
              y[(n * p_.oc + oc) * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow] = act_.apply(static_cast<float>(acc));
            }
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    MOSAIC_RETURN_IF_ERROR(no_fused_backward(act_, *node_));
    const float* x = a.src[0]->f32();
    const float* wt = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx_out = zeroed_grad(a, 0);
    float* dw_out = zeroed_grad(a, 1);
    float* db_out = zeroed_grad(a, 2);
    // The oracle accumulates in double and rounds once.
    std::vector<double> dxd(dx_out ? a.diff_src[0]->numel() : 0), dwd(dw_out ? a.diff_src[1]->numel() : 0),
        dbd(db_out ? a.diff_src[2]->numel() : 0);
    double* dx = dx_out ? dxd.data() : nullptr;
    double* dw = dw_out ? dwd.data() : nullptr;
    double* db = db_out ? dbd.data() : nullptr;
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group();
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    const int64_t ksz = w_.k[0] * w_.k[1] * w_.k[2];
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t oc = 0; oc < p_.oc; ++oc) {
        const int64_t g = oc / ocg;
        for (int64_t od = 0; od < w_.out[0]; ++od)
          for (int64_t oh = 0; oh < w_.out[1]; ++oh)
            for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
              const double grad = dy[(n * p_.oc + oc) * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow];
              if (db) db[oc] += grad;
              for (int64_t ic = 0; ic < cg; ++ic) {
                const int64_t xbase = (n * p_.c + g * cg + ic) * in_sp, wbase = (oc * cg + ic) * ksz;
                for (int64_t kd = 0; kd < w_.k[0]; ++kd) {
                  int64_t id = od * w_.s[0] - w_.pb[0] + kd * w_.d[0];
                  if (id < 0 || id >= w_.in[0]) continue;
                  for (int64_t kh = 0; kh < w_.k[1]; ++kh) {
                    int64_t ih = oh * w_.s[1] - w_.pb[1] + kh * w_.d[1];
                    if (ih < 0 || ih >= w_.in[1]) continue;
                    for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
                      int64_t iw = ow * w_.s[2] - w_.pb[2] + kw * w_.d[2];
                      if (iw < 0 || iw >= w_.in[2]) continue;
                      const int64_t xi = xbase + (id * w_.in[1] + ih) * w_.in[2] + iw;
                      const int64_t wi = wbase + (kd * w_.k[1] + kh) * w_.k[2] + kw;
                      if (dx) dx[xi] += wt[wi] * grad;
                      if (dw) dw[wi] += x[xi] * grad;
                    }
                  }
                }
              }
            }
      }
    for (size_t i = 0; i < dxd.size(); ++i) dx_out[i] = static_cast<float>(dxd[i]);
    for (size_t i = 0; i < dwd.size(); ++i) dw_out[i] = static_cast<float>(dwd[i]);
    for (size_t i = 0; i < dbd.size(); ++i) db_out[i] = static_cast<float>(dbd[i]);
    return Status::ok();
  }

 private:
  ConvParams p_;
  Window3 w_;
  Activation act_;
  const Node* node_ = nullptr;
};

/// ConvTranspose, forward: every input element spread over its kernel window, summed in
/// double per output element.
class ConvTransposeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, conv_transpose_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t k = p_.in.size();
    const int64_t in_size = shape_numel(p_.in), out_size = shape_numel(p_.out), taps = shape_numel(p_.kernel);
    const int64_t cg = p_.c / p_.group, mg = p_.m / p_.group;
    const float *x = src[0]->f32(), *w = src[1]->f32(), *b = p_.has_bias ? src[2]->f32() : nullptr;
    std::vector<double> acc(static_cast<size_t>(p_.n * p_.m * out_size), 0.0);
    std::vector<int64_t> ipos(k), kpos(k);
    for (int64_t i = 0; i < in_size; ++i) {
      for (int64_t r = i, d = static_cast<int64_t>(k) - 1; d >= 0; --d) {
        ipos[static_cast<size_t>(d)] = r % p_.in[static_cast<size_t>(d)];
        r /= p_.in[static_cast<size_t>(d)];
      }
      for (int64_t t = 0; t < taps; ++t) {
        int64_t o = 0;
        bool inside = true;
        for (int64_t r = t, d = static_cast<int64_t>(k) - 1; d >= 0; --d) {
          kpos[static_cast<size_t>(d)] = r % p_.kernel[static_cast<size_t>(d)];
          r /= p_.kernel[static_cast<size_t>(d)];
        }
        for (size_t d = 0; d < k; ++d) {
          const int64_t at = ipos[d] * p_.strides[d] + kpos[d] * p_.dilations[d] - p_.pad_begin[d];
          if (at < 0 || at >= p_.out[d]) inside = false;
          o = o * p_.out[d] + at;
        }
        if (!inside) continue;
        for (int64_t n = 0; n < p_.n; ++n)
          for (int64_t c = 0; c < p_.c; ++c) {
            const double xv = x[(n * p_.c + c) * in_size + i];
            const int64_t g = c / cg;
            for (int64_t m = 0; m < mg; ++m)
              acc[static_cast<size_t>((n * p_.m + g * mg + m) * out_size + o)] += xv * w[(c * mg + m) * taps + t];
          }
      }
    }
    float* y = dst[0]->f32();
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t m = 0; m < p_.m; ++m)
        for (int64_t o = 0; o < out_size; ++o) {
          const int64_t at = (n * p_.m + m) * out_size + o;
          y[at] = static_cast<float>(acc[static_cast<size_t>(at)] + (b ? b[m] : 0.0));
        }
    return Status::ok();
  }

 private:
  ConvTransposeParams p_;
};

/// Col2Im: every column element added to the image position its block and tap reach (none
/// where that falls in the padding), summed in double and rounded once.
class Col2ImKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, col2im_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t k = p_.image.size();
    const int64_t taps = shape_numel(p_.block), positions = shape_numel(p_.blocks), image = shape_numel(p_.image);
    const float* x = src[0]->f32();
    std::vector<double> acc(static_cast<size_t>(p_.n * p_.c * image), 0.0);
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t l = 0; l < positions; ++l) {
        int64_t at = 0;
        bool inside = true;
        for (int64_t d = static_cast<int64_t>(k) - 1, tr = t, lr = l, scale = 1; d >= 0; --d) {
          const auto u = static_cast<size_t>(d);
          const int64_t pos = (lr % p_.blocks[u]) * p_.strides[u] - p_.pad_begin[u] + (tr % p_.block[u]) * p_.dilations[u];
          tr /= p_.block[u];
          lr /= p_.blocks[u];
          inside = inside && pos >= 0 && pos < p_.image[u];
          at += pos * scale;
          scale *= p_.image[u];
        }
        if (!inside) continue;
        for (int64_t b = 0; b < p_.n * p_.c; ++b)  // image b (batch, channel) reads row (b % C) * taps + t
          acc[static_cast<size_t>(b * image + at)] += x[((b * taps) + t) * positions + l];
      }
    float* y = dst[0]->f32();
    for (size_t i = 0; i < acc.size(); ++i) y[i] = static_cast<float>(acc[i]);
    return Status::ok();
  }

 private:
  Col2ImParams p_;
};

/// DeformConv: each output the bias plus, over its group's channels and the kernel's taps,
/// weight x mask x X sampled bilinearly at the tap's position moved by its offset; in double.
class DeformConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, deform_conv_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t taps = p_.kh * p_.kw, outs = p_.oh * p_.ow, cg = p_.c / p_.group, mg = p_.m / p_.group;
    const int64_t per_offset_group = p_.c / p_.offset_group;
    const float *x = src[0]->f32(), *w = src[1]->f32(), *off = src[2]->f32();
    const float* b = p_.has_bias ? src[3]->f32() : nullptr;
    const float* mask = p_.has_mask ? src[4]->f32() : nullptr;
    float* y = dst[0]->f32();
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t m = 0; m < p_.m; ++m)
        for (int64_t o = 0; o < outs; ++o) {
          const int64_t i = o / p_.ow, j = o % p_.ow, g = m / mg;
          double acc = b ? b[m] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int64_t c = g * cg + ci, og = c / per_offset_group;
            const float* plane = x + (n * p_.c + c) * p_.h * p_.w;
            for (int64_t t = 0; t < taps; ++t) {
              const int64_t a = t / p_.kw, k = t % p_.kw;
              const int64_t at = ((n * p_.offset_group + og) * taps + t) * 2 * outs + o;  // the row shift; + outs the column's
              const double yy = static_cast<double>(i * p_.strides[0] - p_.pads[0] + a * p_.dilations[0]) + off[at];
              const double xx = static_cast<double>(j * p_.strides[1] - p_.pads[1] + k * p_.dilations[1]) + off[at + outs];
              const double mk = mask ? mask[((n * p_.offset_group + og) * taps + t) * outs + o] : 1.0;
              acc += sample_bilinear_zero_padded(plane, p_.h, p_.w, yy, xx) * mk * w[(m * cg + ci) * taps + t];
            }
          }
          y[(n * p_.m + m) * outs + o] = static_cast<float>(acc);
        }
    return Status::ok();
  }

 private:
  DeformConvParams p_;
};

}  // namespace

void add_conv_kernels(BackendRegistration& r) {
  r.kernel("DeformConv", make_factory<DeformConvKernel>());
  r.kernel("Col2Im", make_factory<Col2ImKernel>());
  r.kernel("Conv", make_factory<ConvKernel>());
  r.kernel("ConvTranspose", make_factory<ConvTransposeKernel>());
}

}  // namespace mosaic::naive_impl
