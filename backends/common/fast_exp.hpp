// exp, sigmoid and tanh over arrays of floats in a form the compiler vectorises (no libm
// call per element): exp(x) = 2^n exp(r), n = round(x / ln 2), r = x - n ln 2 in
// [-ln 2 / 2, ln 2 / 2] (ln 2 split in two parts so r is exact to float), exp(r) - 1 by its
// Taylor polynomial of degree 7 (relative error below 2e-7 on that interval, about one
// float ulp), 2^n built in the exponent bits. exp of inputs above 88.7 gives exp(88.7);
// below -87.3 (and -inf) gives 0. Used where a kernel evaluates exp per element of large
// arrays (the fused attention's softmax, the recurrent cells' gates).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mosaic {

namespace fast_exp_detail {

constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;

/// exp(v) = 2^k (1 + q(r)) for v clamped to [-87.3, 88.7]: k, 2^k and q (exp(r) - 1 by its
/// Taylor polynomial, so q keeps its relative precision when r is small).
inline float exp_parts(float v, float* scale) {
  v = v < -87.3f ? -87.3f : v;
  v = v > 88.7f ? 88.7f : v;
  // Round to nearest by adding and removing 1.5 * 2^23 (|v log2 e| < 2^22): no floor or
  // branch, so the loops vectorise.
  const float k = (v * kLog2e + 12582912.f) - 12582912.f;
  const float r = (v - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.f / 5040;
  p = p * r + 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  std::memcpy(scale, &bits, sizeof *scale);
  return p * r;
}

inline float exp_one(float x) {
  float scale;
  const bool nan = x != x;  // NaN propagates (and never reaches the float-to-int conversion)
  const float q = exp_parts(nan ? 0.f : x, &scale);
  return nan ? x : x < -87.3f ? 0.f : scale + scale * q;
}

/// tanh(x) = -sign(x) e / (e + 2) with e = exp(-2|x|) - 1: no cancellation near 0.
inline float tanh_one(float x) {
  if (x != x) return x;
  const float a = x < 0 ? -x : x;
  float scale;
  const float q = exp_parts(-2.f * a, &scale);
  const float em1 = (scale - 1.f) + scale * q;
  const float t = -em1 / (em1 + 2.f);
  return x < 0 ? -t : t;
}

}  // namespace fast_exp_detail

/// y[i] = exp(x[i]) (x and y may be the same array).
inline void exp_array(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fast_exp_detail::exp_one(x[i]);
}

/// y[i] = 1 / (1 + exp(-x[i])) (x and y may be the same array).
inline void sigmoid_array(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + fast_exp_detail::exp_one(-x[i]));
}

/// y[i] = tanh(x[i]) (x and y may be the same array).
inline void tanh_array(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fast_exp_detail::tanh_one(x[i]);
}

/// The largest element of x[0..n) (n >= 1), in blocks the compiler vectorises.
inline float max_array(const float* x, int64_t n) {
  float m[16];
  for (int k = 0; k < 16; ++k) m[k] = x[0];
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) m[k] = m[k] > x[i + k] ? m[k] : x[i + k];
  float r = m[0];
  for (int k = 1; k < 16; ++k) r = r > m[k] ? r : m[k];
  for (; i < n; ++i) r = r > x[i] ? r : x[i];
  return r;
}

/// The sum of x[0..n), in 16 partial sums the compiler vectorises.
inline float sum_array(const float* x, int64_t n) {
  float s[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) s[k] += x[i + k];
  float r = 0;
  for (int k = 0; k < 16; ++k) r += s[k];
  for (; i < n; ++i) r += x[i];
  return r;
}

}  // namespace mosaic
