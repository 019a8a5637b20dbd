#include "backends/common/quantize.hpp"

#if defined(__AVX512VBMI__)
#include <immintrin.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/common/broadcast.hpp"
#include "ir/elements.hpp"
#include "operators/ms_quantize.hpp"
#include "operators/quantize.hpp"

namespace mosaic {
namespace {

/// v rounded to type t (a float type) and read back: the quotient as numpy computes it in t.
double round_to(DType t, double v) {
  switch (t) {
    case DType::kF64: return v;
    case DType::kF16: return f16_to_f32(f32_to_f16(f64_to_f32_odd(v)));
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(f64_to_f32_odd(v)));
    default: return static_cast<double>(static_cast<float>(v));
  }
}

/// round_half_even(v) + zero_point saturated to [lo, hi]; NaN gives the zero point.
int64_t requantize(double v, double zero_point, int64_t lo, int64_t hi) {
  if (std::isnan(v)) return static_cast<int64_t>(zero_point);
  const double r = std::nearbyint(v) + zero_point;
  if (r <= static_cast<double>(lo)) return lo;
  if (r >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(r);
}

/// The QDQ models' common case, float32 values and scales with 8-bit integer codes one scale
/// per tensor or per axis, in float32 (the same values as the general loops': a float32
/// quotient and product round once either way) over rows of the layout, on `threads`.
bool float_bytes_case(DType x, DType s, DType q, const QuantScaleLayout& L) {
  return x == DType::kF32 && s == DType::kF32 && (q == DType::kU8 || q == DType::kI8) && L.kind != QuantScaleLayout::kBlock;
}

/// fn(scale index, begin, end) over the elements [begin, end) that share one scale: rows of
/// `inner` elements per (outer, axis) pair, long rows cut into chunks, on `threads` threads.
template <class Fn>
void for_scale_runs(const QuantScaleLayout& L, int threads, Fn fn) {
  const int64_t inner = L.kind == QuantScaleLayout::kTensor ? L.outer * L.axis_dim * L.inner : L.inner;
  const int64_t rows = L.kind == QuantScaleLayout::kTensor ? 1 : L.outer * L.axis_dim;
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = std::max<int64_t>(1, (inner + kChunk - 1) / kChunk), tasks = rows * chunks;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && tasks > 1 && rows * inner > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t r = t / chunks, c = t % chunks;
    const int64_t begin = r * inner + c * kChunk, end = r * inner + std::min(inner, (c + 1) * kChunk);
    fn(L.kind == QuantScaleLayout::kTensor ? 0 : r % L.axis_dim, begin, end);
  }
}

int kernel_threads(bool parallel) {
#ifdef _OPENMP
  return parallel ? omp_get_max_threads() : 1;
#else
  (void)parallel;
  return 1;
#endif
}

template <class Q>
void quantize_bytes(const QuantScaleLayout& L, int threads, const float* x, const float* s, const Q* zp, Q* y) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min()), hi = static_cast<float>(std::numeric_limits<Q>::max());
  for_scale_runs(L, threads, [=](int64_t si, int64_t begin, int64_t end) {
    const float scale = s[si], z = zp ? static_cast<float>(zp[si]) : 0.f;
    const float* __restrict__ xr = x;
    Q* __restrict__ yr = y;
    for (int64_t e = begin; e < end; ++e) {
      const float q = xr[e] / scale;
      // rint rounds half to even as nearbyint does (and vectorises); NaN gives the zero
      // point, as the general loop's requantize.
      const float r = std::min(hi, std::max(lo, std::rint(q) + z));
      yr[e] = static_cast<Q>(q == q ? r : z);
    }
  });
}

template <class Q>
void dequantize_bytes(const QuantScaleLayout& L, int threads, const Q* x, const float* s, const Q* zp, float* y) {
  for_scale_runs(L, threads, [=](int64_t si, int64_t begin, int64_t end) {
    const float scale = s[si];
    const int z = zp ? zp[si] : 0;
    const Q* __restrict__ xr = x;
    float* __restrict__ yr = y;
    for (int64_t e = begin; e < end; ++e) yr[e] = static_cast<float>(static_cast<int>(xr[e]) - z) * scale;
  });
}

class QuantizeLinearKernel final : public Kernel {
 public:
  /// `fast`: the optimised backends' kernel (the float32 <-> 8-bit case vectorised, on every
  /// thread); the oracle's runs the general loops.
  explicit QuantizeLinearKernel(bool fast) : fast_(fast), threads_(kernel_threads(fast)) {}
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, quant_linear_params(ctx));
    x_ = ctx.inputs[0].dtype;
    s_ = ctx.inputs[1].dtype;
    if (p_.has_zero_point) zp_ = ctx.inputs[2].dtype;
    integer_ = quant_int_range(p_.out, &lo_, &hi_);
    bytes_ = fast_ && float_bytes_case(x_, s_, p_.out, p_.layout) && (!p_.has_zero_point || zp_ == p_.out);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const QuantScaleLayout& L = p_.layout;
    if (bytes_) {
      const float* x = src[0]->f32();
      const float* s = src[1]->f32();
      const void* zp = p_.has_zero_point ? src[2]->data() : nullptr;
      if (p_.out == DType::kU8)
        quantize_bytes(L, threads_, x, s, static_cast<const uint8_t*>(zp), static_cast<uint8_t*>(dst[0]->data()));
      else
        quantize_bytes(L, threads_, x, s, static_cast<const int8_t*>(zp), static_cast<int8_t*>(dst[0]->data()));
      return Status::ok();
    }
    const void* x = src[0]->data();
    const void* s = src[1]->data();
    const void* zp = p_.has_zero_point ? src[2]->data() : nullptr;
    void* y = dst[0]->data();
    int64_t e = 0;
    for (int64_t o = 0; o < L.outer; ++o)
      for (int64_t a = 0; a < L.axis_dim; ++a)
        for (int64_t i = 0; i < L.inner; ++i, ++e) {
          const int64_t si = L.index(o, a, i);
          const double q = round_to(p_.divide_in, load_f64(x_, x, e) / load_f64(s_, s, si));
          if (integer_) {
            store_i64(p_.out, y, e, requantize(q, zp ? static_cast<double>(load_i64(zp_, zp, si)) : 0.0, lo_, hi_));
          } else if (p_.out == DType::kF4E2M1) {
            store_f64(p_.out, y, e, q + (zp ? load_f64(zp_, zp, si) : 0.0));  // float4 always saturates
          } else {
            store_f64(p_.out, y, e, q, p_.saturate);  // the 8-bit floats: no zero point (ONNX)
          }
        }
    return Status::ok();
  }

 private:
  QuantLinearParams p_;
  DType x_ = DType::kF32, s_ = DType::kF32, zp_ = DType::kU8;
  bool integer_ = true, fast_ = false, bytes_ = false;
  int64_t lo_ = 0, hi_ = 255;
  int threads_ = 1;
};

class DequantizeLinearKernel final : public Kernel {
 public:
  explicit DequantizeLinearKernel(bool fast) : fast_(fast), threads_(kernel_threads(fast)) {}
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, quant_linear_params(ctx));
    x_ = ctx.inputs[0].dtype;
    s_ = ctx.inputs[1].dtype;
    // The floats' zero point is ignored, as ONNX's reference ignores it.
    use_zp_ = p_.has_zero_point && !dtype_is_float(x_);
    bytes_ = fast_ && float_bytes_case(p_.out, s_, x_, p_.layout) && (!use_zp_ || ctx.inputs[2].dtype == x_);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const QuantScaleLayout& L = p_.layout;
    if (bytes_) {
      const float* s = src[1]->f32();
      const void* zp = use_zp_ ? src[2]->data() : nullptr;
      float* y = dst[0]->f32();
      if (x_ == DType::kU8)
        dequantize_bytes(L, threads_, static_cast<const uint8_t*>(src[0]->data()), s, static_cast<const uint8_t*>(zp), y);
      else
        dequantize_bytes(L, threads_, static_cast<const int8_t*>(src[0]->data()), s, static_cast<const int8_t*>(zp), y);
      return Status::ok();
    }
    const void* x = src[0]->data();
    const void* s = src[1]->data();
    const void* zp = use_zp_ ? src[2]->data() : nullptr;
    void* y = dst[0]->data();
    int64_t e = 0;
    for (int64_t o = 0; o < L.outer; ++o)
      for (int64_t a = 0; a < L.axis_dim; ++a)
        for (int64_t i = 0; i < L.inner; ++i, ++e) {
          const int64_t si = L.index(o, a, i);
          // Integers: the difference is exact in int64 and the product rounds once.
          const double v = zp ? static_cast<double>(load_i64(x_, x, e) - load_i64(x_, zp, si)) : load_f64(x_, x, e);
          store_f64(p_.out, y, e, v * load_f64(s_, s, si));
        }
    return Status::ok();
  }

 private:
  QuantLinearParams p_;
  DType x_ = DType::kU8, s_ = DType::kF32;
  bool use_zp_ = false, fast_ = false, bytes_ = false;
  int threads_ = 1;
};

/// uint8 with the scale and zero point of [min(0, min x), max(0, max x)], in float32 as
/// ONNX specifies.
/// The range [lo, hi] of n float32 values and 0, on `threads`: min and max are exact in any
/// order, and a NaN is passed over as the oracle's loop passes it (each comparison with it is
/// false). Sixteen lanes per chunk, so that the compiler keeps them in one vector register
/// (an OpenMP simd reduction did not vectorise: 3.5x slower).
void range_with_zero(const float* x, int64_t n, int threads, float* lo, float* hi) {
  constexpr int64_t kChunk = 16384;
  const int64_t tasks = (n + kChunk - 1) / kChunk;
  float l = 0, h = 0;
#pragma omp parallel for schedule(static) num_threads(threads) reduction(min : l) reduction(max : h) if (threads > 1 && n > 32768)
  for (int64_t t = 0; t < tasks; ++t) {
    float ls[16] = {}, hs[16] = {};
    const int64_t begin = t * kChunk, end = std::min(n, begin + kChunk);
    int64_t i = begin;
    for (; i + 16 <= end; i += 16)
      for (int k = 0; k < 16; ++k) {
        ls[k] = x[i + k] < ls[k] ? x[i + k] : ls[k];
        hs[k] = x[i + k] > hs[k] ? x[i + k] : hs[k];
      }
    for (; i < end; ++i) {
      ls[0] = x[i] < ls[0] ? x[i] : ls[0];
      hs[0] = x[i] > hs[0] ? x[i] : hs[0];
    }
    for (int k = 0; k < 16; ++k) {
      l = std::min(l, ls[k]);
      h = std::max(h, hs[k]);
    }
  }
  *lo = l, *hi = h;
}

class DynamicQuantizeLinearKernel final : public Kernel {
 public:
  /// `fast`: float32 x on every thread, vectorised (the optimised backends' kernel); the
  /// oracle's reads any float type element by element. The same codes either way.
  explicit DynamicQuantizeLinearKernel(bool fast) : fast_(fast), threads_(kernel_threads(fast)) {}
  Status init(const KernelContext& ctx) {
    x_ = ctx.inputs[0].dtype;
    fast_ = fast_ && x_ == DType::kF32;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t n = src[0]->numel();
    float lo = 0, hi = 0;
    if (fast_) {
      range_with_zero(src[0]->f32(), n, threads_, &lo, &hi);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(load_f64(x_, src[0]->data(), i));
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    const float scale = (hi == lo ? 1.0f : hi - lo) / 255.0f;
    const float zp_float = std::min(255.0f, std::max(0.0f, 0.0f - lo / scale));
    const float zp = std::nearbyint(zp_float);
    uint8_t* y = static_cast<uint8_t*>(dst[0]->data());
    if (fast_) {
      QuantScaleLayout whole;
      whole.inner = n;
      const auto zp_code = static_cast<uint8_t>(zp);
      quantize_bytes(whole, threads_, src[0]->f32(), &scale, &zp_code, y);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const float q = static_cast<float>(load_f64(x_, src[0]->data(), i)) / scale;
        y[i] = static_cast<uint8_t>(requantize(q, zp, 0, 255));
      }
    }
    if (dst.size() > 1 && dst[1]) store_f64(x_, dst[1]->data(), 0, scale);
    if (dst.size() > 2 && dst[2]) static_cast<uint8_t*>(dst[2]->data())[0] = static_cast<uint8_t>(zp);
    return Status::ok();
  }

 private:
  DType x_ = DType::kF32;
  bool fast_ = false;
  int threads_ = 1;
};

/// A scale or zero point that is one value or one per index of an n-long axis.
Status check_per_index(const KernelContext& ctx, size_t i, int64_t n, const char* what, const char* axis) {
  if (!ctx.has_input(i)) return Status::ok();
  const Shape& s = ctx.inputs[i].shape;
  if (shape_numel(s) == 1 || s == Shape{n}) return Status::ok();
  return Status::invalid(ctx.node->label() + ": " + what + " " + shape_str(s) + " must be one value or one per " + axis +
                         " ([" + std::to_string(n) + "])");
}

/// Value k of a per-index input (0 where it is omitted; the one value where it has one).
struct PerIndex {
  const Tensor* t = nullptr;
  double f(int64_t k) const {
    if (!t) return 0;
    return load_f64(t->dtype(), t->data(), t->numel() == 1 ? 0 : k);
  }
  int64_t i(int64_t k) const {
    if (!t) return 0;
    return load_i64(t->dtype(), t->data(), t->numel() == 1 ? 0 : k);
  }
};

PerIndex input_at(const std::vector<const Tensor*>& src, size_t i) {
  return PerIndex{i < src.size() ? src[i] : nullptr};
}


/// Integer products over a broadcast batch: MatMulInteger (int32 out) and QLinearMatMul.
class IntegerMatMulKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    qlinear_ = ctx.node->op_type == "QLinearMatMul";
    b_ = qlinear_ ? 3 : 1;
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[b_].shape);
    if (!p.ok()) return Status::invalid(ctx.node->label() + ": " + p.status().message());
    p_ = *p;
    a_dtype_ = ctx.inputs[0].dtype;
    b_dtype_ = ctx.inputs[b_].dtype;
    out_ = ctx.outputs[0].dtype;
    if (qlinear_) {
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 1, p_.m, "a_scale", "row of a"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 2, p_.m, "a_zero_point", "row of a"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 4, p_.n, "b_scale", "column of b"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 5, p_.n, "b_zero_point", "column of b"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 6, 1, "y_scale", "tensor"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 7, 1, "y_zero_point", "tensor"));
      quant_int_range(out_, &lo_, &hi_);
    } else {
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 2, p_.m, "a_zero_point", "row of A"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 3, p_.n, "b_zero_point", "column of B"));
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t M = p_.m, N = p_.n, K = p_.k;
    const void* a = src[0]->data();
    const void* b = src[b_]->data();
    const PerIndex a_zp = input_at(src, 2), b_zp = input_at(src, qlinear_ ? 5 : 3);
    const PerIndex a_scale = input_at(src, 1), b_scale = input_at(src, 4), y_scale = input_at(src, 6),
                   y_zp = input_at(src, 7);
    void* y = dst[0]->data();
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t ma, int64_t mb) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          int64_t acc = 0;  // exact: |a - zp| * |b - zp| * K stays far below 2^63
          for (int64_t k = 0; k < K; ++k)
            acc += (load_i64(a_dtype_, a, (ma * M + m) * K + k) - a_zp.i(m)) *
                   (load_i64(b_dtype_, b, (mb * K + k) * N + n) - b_zp.i(n));
          const int64_t at = (bi * M + m) * N + n;
          // int32 accumulation as ONNX specifies: the exact sum wrapped to 32 bits.
          const int64_t acc32 = static_cast<int32_t>(static_cast<uint32_t>(acc));
          if (!qlinear_) {
            store_i64(DType::kI32, y, at, acc32);
            continue;
          }
          const double r = static_cast<double>(acc32) * qlinear_multiplier(a_scale.f(m), b_scale.f(n), y_scale.f(0));
          store_i64(out_, y, at, requantize(r, static_cast<double>(y_zp.i(0)), lo_, hi_));
        }
    });
    return Status::ok();
  }

 private:
  MatMulParams p_;
  bool qlinear_ = false;
  size_t b_ = 1;
  DType a_dtype_ = DType::kU8, b_dtype_ = DType::kU8, out_ = DType::kI32;
  int64_t lo_ = 0, hi_ = 255;
};

/// ConvInteger (int32 out) and QLinearConv (requantised, with an int32 bias).
class IntegerConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    qlinear_ = ctx.node->op_type == "QLinearConv";
    w_ = qlinear_ ? 3 : 1;
    MOSAIC_ASSIGN_OR_RETURN(p_, quant_conv_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(win_, lift_window3(p_.win, *ctx.node));
    x_dtype_ = ctx.inputs[0].dtype;
    w_dtype_ = ctx.inputs[w_].dtype;
    out_ = ctx.outputs[0].dtype;
    if (qlinear_) {
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 1, 1, "x_scale", "tensor"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 2, 1, "x_zero_point", "tensor"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 4, p_.oc, "w_scale", "output channel"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 5, p_.oc, "w_zero_point", "output channel"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 6, 1, "y_scale", "tensor"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 7, 1, "y_zero_point", "tensor"));
      quant_int_range(out_, &lo_, &hi_);
    } else {
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 2, 1, "x_zero_point", "tensor"));
      MOSAIC_RETURN_IF_ERROR(check_per_index(ctx, 3, p_.oc, "w_zero_point", "output channel"));
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const void* x = src[0]->data();
    const void* w = src[w_]->data();
    const PerIndex x_zp = input_at(src, 2), w_zp = input_at(src, qlinear_ ? 5 : 3);
    const PerIndex x_scale = input_at(src, 1), w_scale = input_at(src, 4), y_scale = input_at(src, 6),
                   y_zp = input_at(src, 7), bias = qlinear_ ? input_at(src, 8) : PerIndex{};
    void* y = dst[0]->data();
    const Window3& W = win_;
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group();
    const int64_t in_sp = W.in_size(), out_sp = W.out_size(), ksz = W.k[0] * W.k[1] * W.k[2];
    const int64_t xzp = x_zp.i(0);
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t oc = 0; oc < p_.oc; ++oc) {
        const int64_t g = oc / ocg, wzp = w_zp.i(oc);
        const double mult = qlinear_ ? qlinear_multiplier(x_scale.f(0), w_scale.f(oc), y_scale.f(0)) : 0.0;
        for (int64_t o0 = 0; o0 < W.out[0]; ++o0)
          for (int64_t o1 = 0; o1 < W.out[1]; ++o1)
            for (int64_t o2 = 0; o2 < W.out[2]; ++o2) {
              int64_t acc = bias.i(oc);
              for (int64_t ic = 0; ic < cg; ++ic) {
                const int64_t xbase = (n * p_.c + g * cg + ic) * in_sp, wbase = (oc * cg + ic) * ksz;
                int64_t tap = 0;
                // Padding holds the zero point: (x_zp - x_zp) contributes nothing.
                for (int64_t a = 0; a < W.k[0]; ++a)
                  for (int64_t b = 0; b < W.k[1]; ++b)
                    for (int64_t c = 0; c < W.k[2]; ++c, ++tap) {
                      const int64_t i0 = o0 * W.s[0] - W.pb[0] + a * W.d[0], i1 = o1 * W.s[1] - W.pb[1] + b * W.d[1],
                                    i2 = o2 * W.s[2] - W.pb[2] + c * W.d[2];
                      if (i0 < 0 || i0 >= W.in[0] || i1 < 0 || i1 >= W.in[1] || i2 < 0 || i2 >= W.in[2]) continue;
                      acc += (load_i64(x_dtype_, x, xbase + (i0 * W.in[1] + i1) * W.in[2] + i2) - xzp) *
                             (load_i64(w_dtype_, w, wbase + tap) - wzp);
                    }
              }
              const int64_t at = (n * p_.oc + oc) * out_sp + (o0 * W.out[1] + o1) * W.out[2] + o2;
              const int64_t acc32 = static_cast<int32_t>(static_cast<uint32_t>(acc));
              if (!qlinear_) store_i64(DType::kI32, y, at, acc32);
              else store_i64(out_, y, at, requantize(static_cast<double>(acc32) * mult, static_cast<double>(y_zp.i(0)), lo_, hi_));
            }
      }
    return Status::ok();
  }

 private:
  ConvParams p_;
  Window3 win_;
  bool qlinear_ = false;
  size_t w_ = 1;
  DType x_dtype_ = DType::kU8, w_dtype_ = DType::kU8, out_ = DType::kI32;
  int64_t lo_ = 0, hi_ = 255;
};

/// CodeLookup: Y[i] = Table[X[i] - the least code] over the bytes, the table constant or not
/// (read each run), on every thread for the optimised backends.
class CodeLookupKernel final : public Kernel {
 public:
  explicit CodeLookupKernel(bool fast) : fast_(fast), threads_(kernel_threads(fast)) {}
  Status init(const KernelContext& ctx) {
    offset_ = ctx.inputs[0].dtype == DType::kI8 ? 128 : 0;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* x = static_cast<const uint8_t*>(src[0]->data());
    const auto* table = static_cast<const uint8_t*>(src[1]->data());
    auto* y = static_cast<uint8_t*>(dst[0]->data());
    const int64_t n = src[0]->numel();
    const uint8_t offset = offset_;
    // int8 code c sits at table[c + 128]: its byte plus 128, modulo 256.
#if defined(__AVX512VBMI__)
    if (!fast_) {  // the oracle's: the plain loop
      for (int64_t i = 0; i < n; ++i) y[i] = table[static_cast<uint8_t>(x[i] + offset)];
      return Status::ok();
    }
    // 64 codes at a time: two 128-byte halves of the table as byte permutations, chosen by
    // each index's top bit.
    __m512i t[4];
    for (int k = 0; k < 4; ++k) t[k] = _mm512_loadu_si512(table + 64 * k);
    const __m512i off = _mm512_set1_epi8(static_cast<char>(offset));
    const int64_t blocks = n / 64;
#pragma omp parallel for schedule(static) num_threads(threads_) if (threads_ > 1 && n > 65536)
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512i idx = _mm512_add_epi8(_mm512_loadu_si512(x + 64 * b), off);
      const __m512i lo = _mm512_permutex2var_epi8(t[0], idx, t[1]), hi = _mm512_permutex2var_epi8(t[2], idx, t[3]);
      _mm512_storeu_si512(y + 64 * b, _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi));
    }
    for (int64_t i = blocks * 64; i < n; ++i) y[i] = table[static_cast<uint8_t>(x[i] + offset)];
#else
#pragma omp parallel for schedule(static) num_threads(threads_) if (threads_ > 1 && n > 65536)
    for (int64_t i = 0; i < n; ++i) y[i] = table[static_cast<uint8_t>(x[i] + offset)];
#endif
    return Status::ok();
  }

 private:
  bool fast_ = false;
  int threads_ = 1;
  uint8_t offset_ = 0;
};

/// make_factory for the kernels with the oracle's loops or (`fast`) the optimised backends' path.
template <class K>
KernelFactory threaded_factory(bool fast) {
  return [fast](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    auto k = std::make_unique<K>(fast);
    MOSAIC_RETURN_IF_ERROR(k->init(ctx));
    return std::unique_ptr<Kernel>(std::move(k));
  };
}

}  // namespace

void add_quantize_kernels(BackendRegistration& r) {
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  r.kernel("QuantizeLinear", threaded_factory<QuantizeLinearKernel>(false), any);
  r.kernel("DequantizeLinear", threaded_factory<DequantizeLinearKernel>(false), any);
  r.kernel("DynamicQuantizeLinear", threaded_factory<DynamicQuantizeLinearKernel>(false), any);
  r.kernel("MatMulInteger", make_factory<IntegerMatMulKernel>(), any);
  r.kernel("QLinearMatMul", make_factory<IntegerMatMulKernel>(), any);
  r.kernel("ConvInteger", make_factory<IntegerConvKernel>(), any);
  r.kernel("QLinearConv", make_factory<IntegerConvKernel>(), any);
  r.kernel(kCodeLookupOp, threaded_factory<CodeLookupKernel>(false), any);
  // com.microsoft's QuantizeLinear and DequantizeLinear are ONNX's (operators/ms_quantize.hpp).
  r.kernel(op_key(kMicrosoftDomain, "QuantizeLinear"), threaded_factory<QuantizeLinearKernel>(false), any);
  r.kernel(op_key(kMicrosoftDomain, "DequantizeLinear"), threaded_factory<DequantizeLinearKernel>(false), any);
}

void add_qdq_kernels(BackendRegistration& r) {
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  r.kernel("QuantizeLinear", threaded_factory<QuantizeLinearKernel>(true), any);
  r.kernel("DequantizeLinear", threaded_factory<DequantizeLinearKernel>(true), any);
  r.kernel("DynamicQuantizeLinear", threaded_factory<DynamicQuantizeLinearKernel>(true), any);
  r.kernel(kCodeLookupOp, threaded_factory<CodeLookupKernel>(true), any);
}

/// The requantisation multiplier as ONNX's reference forms it: in float32, a_scale * b_scale
/// rounded, then divided by y_scale and rounded.
double qlinear_multiplier(double a_scale, double b_scale, double y_scale) {
  const float ab = static_cast<float>(a_scale) * static_cast<float>(b_scale);
  return static_cast<double>(ab / static_cast<float>(y_scale));
}

}  // namespace mosaic
