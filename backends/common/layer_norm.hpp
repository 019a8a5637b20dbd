// LayerNormalization's one definition of its arithmetic: forward in float or double (the
// naive oracle, im2col and gradcheck's double reference) and backward in float (PyTorch's
// native_layer_norm_backward formulas). Row statistics are accumulated in double.
// RMSNormalization's forward, likewise; GroupNormalization's and InstanceNormalization's
// kernel (forward, statistics in double).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/registration.hpp"
#include "operators/normalization.hpp"
#include "operators/params.hpp"

namespace mosaic {

/// y = (x - mean) * invstd * scale + bias per row; mean and invstd (may be null) get each
/// row's statistics. bias may be null.
template <class T>
void layer_norm_forward(const LayerNormParams& p, const T* x, const T* scale, const T* bias, T* y, T* mean,
                        T* invstd) {
  for (int64_t r = 0; r < p.outer; ++r) {
    const T* xr = x + r * p.inner;
    double s = 0;
    for (int64_t i = 0; i < p.inner; ++i) s += xr[i];
    const double m = s / static_cast<double>(p.inner);
    double v = 0;
    for (int64_t i = 0; i < p.inner; ++i) v += (xr[i] - m) * (xr[i] - m);
    const double is = 1 / std::sqrt(v / static_cast<double>(p.inner) + p.epsilon);
    T* yr = y + r * p.inner;
    for (int64_t i = 0; i < p.inner; ++i)
      yr[i] = static_cast<T>((xr[i] - m) * is * scale[i] + (bias ? static_cast<double>(bias[i]) : 0.0));
    if (mean) mean[r] = static_cast<T>(m);
    if (invstd) invstd[r] = static_cast<T>(is);
  }
}

/// dx, dscale, dbias (each may be null; overwritten) from dy and the forward's x and scale.
/// The statistics are recomputed from x. With xhat = (x - mean) invstd and g = dy scale:
/// dx = invstd (g - mean(g) - xhat mean(g xhat)), dscale = sum over rows of dy xhat,
/// dbias = sum over rows of dy.
inline void layer_norm_backward(const LayerNormParams& p, const float* x, const float* scale, const float* dy,
                                float* dx, float* dscale, float* dbias) {
  std::vector<double> ds(dscale ? static_cast<size_t>(p.inner) : 0, 0.0), db(dbias ? static_cast<size_t>(p.inner) : 0, 0.0);
  std::vector<double> xhat(static_cast<size_t>(p.inner));
  const double n = static_cast<double>(p.inner);
  for (int64_t r = 0; r < p.outer; ++r) {
    const float* xr = x + r * p.inner;
    const float* gr = dy + r * p.inner;
    double s = 0;
    for (int64_t i = 0; i < p.inner; ++i) s += xr[i];
    const double m = s / n;
    double v = 0;
    for (int64_t i = 0; i < p.inner; ++i) v += (xr[i] - m) * (xr[i] - m);
    const double is = 1 / std::sqrt(v / n + p.epsilon);
    double sg = 0, sgx = 0;
    for (int64_t i = 0; i < p.inner; ++i) {
      xhat[i] = (xr[i] - m) * is;
      const double g = static_cast<double>(gr[i]) * scale[i];
      sg += g;
      sgx += g * xhat[i];
      if (dscale) ds[i] += static_cast<double>(gr[i]) * xhat[i];
      if (dbias) db[i] += gr[i];
    }
    if (dx)
      for (int64_t i = 0; i < p.inner; ++i)
        dx[r * p.inner + i] =
            static_cast<float>(is * (static_cast<double>(gr[i]) * scale[i] - sg / n - xhat[i] * sgx / n));
  }
  for (size_t i = 0; i < ds.size(); ++i) dscale[i] = static_cast<float>(ds[i]);
  for (size_t i = 0; i < db.size(); ++i) dbias[i] = static_cast<float>(db[i]);
}

/// Registers the loops above as LayerNormalization's kernel on a backend (naive, im2col).
void add_layer_norm_loop_kernel(BackendRegistration& r, SupportCheck supports);

/// RMSNormalization (opset 23): y = x / sqrt(mean(x^2) + epsilon) * scale per row, the mean
/// of squares accumulated in double and y rounded once; scale has `inner` elements or one.
inline void rms_norm_forward(const RmsNormParams& p, const float* x, const float* scale, float* y) {
  for (int64_t o = 0; o < p.outer; ++o) {
    const float* row = x + o * p.inner;
    double sq = 0;
    for (int64_t i = 0; i < p.inner; ++i) sq += static_cast<double>(row[i]) * row[i];
    const double k = 1 / std::sqrt(sq / static_cast<double>(p.inner) + p.epsilon);
    float* out = y + o * p.inner;
    for (int64_t i = 0; i < p.inner; ++i) out[i] = static_cast<float>(row[i] * k * scale[p.scalar_scale ? 0 : i]);
  }
}

/// Registers rms_norm_forward as RMSNormalization's kernel (float32; forward only): the
/// naive oracle's, and the CPU backends' for the RMSNorm decompositions the fusion pass
/// recognises (core/fuse_layer_norm.cpp).
void add_rms_norm_loop_kernel(BackendRegistration& r);

/// Registers GroupNormalization's and InstanceNormalization's kernel (float32; forward only):
/// each (image, group) normalised over its channels' spatial positions with statistics in
/// double, then scaled and shifted per channel (per group before opset 21).
void add_group_norm_loop_kernel(BackendRegistration& r);

}  // namespace mosaic
