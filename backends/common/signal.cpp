#include "backends/common/signal.hpp"

#include <cmath>
#include <complex>
#include <vector>

#include "ir/elements.hpp"
#include "operators/signal.hpp"

namespace mosaic {
namespace {

using Complex = std::complex<double>;

/// e^(sign * 2 pi i * (k mod n) / n): the index reduced first, so long transforms keep
/// their precision.
Complex twiddle(int64_t k, int64_t n, double sign) {
  const double a = sign * 2.0 * 3.14159265358979323846 * static_cast<double>(k % n) / static_cast<double>(n);
  return {std::cos(a), std::sin(a)};
}

class DftKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, dft_params(ctx));
    dtype_ = ctx.inputs[0].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const DftParams& p = p_;
    const void* x = src[0]->data();
    void* y = dst[0]->data();
    const int64_t L = p.length;
    // The signal as the transform sees it: truncated or zero-padded to its length (the
    // one-sided inverse reads L / 2 + 1 coefficients).
    const int64_t used = p.inverse && p.onesided ? L / 2 + 1 : L;
    std::vector<Complex> line(static_cast<size_t>(used)), out(static_cast<size_t>(p.out_len));
    for (int64_t o = 0; o < p.outer; ++o)
      for (int64_t i = 0; i < p.inner; ++i) {
        for (int64_t k = 0; k < used; ++k) {
          Complex v = 0;
          if (k < p.in_len) {
            const int64_t at = ((o * p.in_len + k) * p.inner + i) * p.in_parts;
            v = {load_f64(dtype_, x, at), p.in_parts == 2 ? load_f64(dtype_, x, at + 1) : 0.0};
          }
          line[static_cast<size_t>(k)] = v;
        }
        if (!p.inverse) {
          for (int64_t f = 0; f < p.out_len; ++f) {
            Complex s = 0;
            for (int64_t k = 0; k < L; ++k) s += line[static_cast<size_t>(k)] * twiddle(f * k, L, -1);
            out[static_cast<size_t>(f)] = s;
          }
        } else if (!p.onesided) {
          for (int64_t t = 0; t < L; ++t) {
            Complex s = 0;
            for (int64_t k = 0; k < L; ++k) s += line[static_cast<size_t>(k)] * twiddle(t * k, L, 1);
            out[static_cast<size_t>(t)] = s / static_cast<double>(L);
          }
        } else {
          // The real signal whose spectrum is Hermitian with these first L / 2 + 1
          // coefficients (the imaginary parts of X[0] and, for even L, X[L/2] drop out).
          for (int64_t t = 0; t < L; ++t) {
            double s = line[0].real();
            for (int64_t k = 1; 2 * k < L; ++k) s += 2.0 * (line[static_cast<size_t>(k)] * twiddle(t * k, L, 1)).real();
            if (L % 2 == 0) s += line[static_cast<size_t>(L / 2)].real() * (t % 2 ? -1.0 : 1.0);
            out[static_cast<size_t>(t)] = s / static_cast<double>(L);
          }
        }
        for (int64_t f = 0; f < p.out_len; ++f) {
          const int64_t at = ((o * p.out_len + f) * p.inner + i) * p.out_parts;
          store_f64(dtype_, y, at, out[static_cast<size_t>(f)].real());
          if (p.out_parts == 2) store_f64(dtype_, y, at + 1, out[static_cast<size_t>(f)].imag());
        }
      }
    return Status::ok();
  }

 private:
  DftParams p_;
  DType dtype_ = DType::kF32;
};

class StftKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, stft_params(ctx));
    dtype_ = ctx.inputs[0].dtype;
    if (p_.has_window) window_dtype_ = ctx.inputs[2].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const StftParams& p = p_;
    const void* x = src[0]->data();
    const void* w = p.has_window ? src[2]->data() : nullptr;
    void* y = dst[0]->data();
    std::vector<Complex> frame(static_cast<size_t>(p.frame_length));
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t f = 0; f < p.frames; ++f) {
        for (int64_t k = 0; k < p.frame_length; ++k) {
          const int64_t at = (b * p.length + f * p.step + k) * p.parts;
          const double scale = w ? load_f64(window_dtype_, w, k) : 1.0;
          frame[static_cast<size_t>(k)] =
              Complex(load_f64(dtype_, x, at), p.parts == 2 ? load_f64(dtype_, x, at + 1) : 0.0) * scale;
        }
        for (int64_t q = 0; q < p.bins; ++q) {
          Complex s = 0;
          for (int64_t k = 0; k < p.frame_length; ++k) s += frame[static_cast<size_t>(k)] * twiddle(q * k, p.frame_length, -1);
          const int64_t at = ((b * p.frames + f) * p.bins + q) * 2;
          store_f64(dtype_, y, at, s.real());
          store_f64(dtype_, y, at + 1, s.imag());
        }
      }
    return Status::ok();
  }

 private:
  StftParams p_;
  DType dtype_ = DType::kF32, window_dtype_ = DType::kF32;
};

class MelKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, mel_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>& dst) override {
    for (int64_t bin = 0; bin < p_.spectrum_bins; ++bin)
      for (int64_t mel = 0; mel < p_.mel_bins; ++mel)
        store_f64(p_.dtype, dst[0]->data(), bin * p_.mel_bins + mel, mel_weight(p_, bin, mel));
    return Status::ok();
  }

 private:
  MelParams p_;
};

}  // namespace

void add_signal_kernels(BackendRegistration& r) {
  r.kernel("MelWeightMatrix", make_factory<MelKernel>(), {LayoutUse::kNone, nullptr, kAllDTypes});
  r.kernel("STFT", make_factory<StftKernel>(),
           {LayoutUse::kNone, nullptr, dtype_bit(DType::kF32) | dtype_bit(DType::kF64) | dtype_bit(DType::kI64) | dtype_bit(DType::kI32)});
  r.kernel("DFT", make_factory<DftKernel>(), {LayoutUse::kNone, nullptr, dtype_bit(DType::kF32) | dtype_bit(DType::kF64) | dtype_bit(DType::kI64) | dtype_bit(DType::kI32)});  // the integers: dft_length and axis
}

}  // namespace mosaic
