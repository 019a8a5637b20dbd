#include "backends/common/grid_sample.hpp"

#include <cmath>

#include "operators/grid_sample.hpp"

namespace mosaic {
namespace {

/// Reflects x into [lo, hi] by its nearer border, as often as it takes.
double reflect(double x, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (x < lo) {
    const double dx = lo - x;
    const auto k = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(k) * range;
    return k % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const double dx = x - hi;
    const auto k = static_cast<int64_t>(dx / range);
    const double r = dx - static_cast<double>(k) * range;
    return k % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

/// Keys' cubic convolution weights (alpha = -0.75) of the taps at -1, 0, 1, 2 from floor(x).
void cubic_weights(double t, double w[4]) {
  constexpr double a = -0.75;
  auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };
  auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

class GridSampleKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, grid_sample_params(ctx));
    return Status::ok();
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto k = p_.in.size();
    const int64_t plane = shape_numel(p_.in), points = shape_numel(p_.out);
    const float* grid = src[1]->f32();
    float* y = dst[0]->f32();
    std::vector<double> lo(k), hi(k), coord(k);
    for (size_t d = 0; d < k; ++d) {
      lo[d] = p_.align_corners ? 0.0 : -0.5;
      hi[d] = p_.align_corners ? static_cast<double>(p_.in[d] - 1) : static_cast<double>(p_.in[d]) - 0.5;
    }
    const int taps = p_.mode == GridMode::kNearest ? 1 : p_.mode == GridMode::kLinear ? 2 : 4;
    std::vector<std::vector<double>> weight(k, std::vector<double>(4));
    std::vector<std::vector<int64_t>> index(k, std::vector<int64_t>(4));
    for (int64_t b = 0; b < p_.n; ++b)
      for (int64_t o = 0; o < points; ++o) {
        const float* g = grid + (b * points + o) * static_cast<int64_t>(k);
        for (size_t d = 0; d < k; ++d) {
          const double v = g[k - 1 - d];  // the grid lists x (the last axis) first
          const double size = static_cast<double>(p_.in[d]);
          double x = p_.align_corners ? (v + 1) / 2 * (size - 1) : ((v + 1) * size - 1) / 2;
          if (p_.mode == GridMode::kNearest) x = std::nearbyint(x);
          if (x < lo[d] || x > hi[d]) {
            if (p_.padding == GridPadding::kBorder) x = std::fmin(std::fmax(x, 0.0), size - 1);
            else if (p_.padding == GridPadding::kReflection) x = reflect(x, lo[d], hi[d]);
          }
          coord[d] = x;
          if (p_.mode == GridMode::kNearest) {
            index[d][0] = static_cast<int64_t>(x);  // truncated, as the reference's int cast
            weight[d][0] = 1;
          } else {
            const double f = std::floor(x);
            const double t = x - f;
            const auto base = static_cast<int64_t>(f);
            if (p_.mode == GridMode::kLinear) {
              weight[d][0] = 1 - t;
              weight[d][1] = t;
              index[d][0] = base;
              index[d][1] = base + 1;
            } else {
              cubic_weights(t, weight[d].data());
              for (int j = 0; j < 4; ++j) index[d][static_cast<size_t>(j)] = base - 1 + j;
            }
          }
        }
        for (int64_t ch = 0; ch < p_.c; ++ch) {
          const float* x = src[0]->f32() + (b * p_.c + ch) * plane;
          double acc = 0;
          int64_t combos = 1;
          for (size_t d = 0; d < k; ++d) combos *= taps;
          for (int64_t combo = 0; combo < combos; ++combo) {
            double w = 1;
            int64_t at = 0;
            bool zero = false;
            int64_t rest = combo;
            for (size_t d = 0; d < k; ++d) {
              const auto j = static_cast<size_t>(rest % taps);
              rest /= taps;
              w *= weight[d][j];
              int64_t i = index[d][j];
              if (i < 0 || i >= p_.in[d]) {
                if (p_.padding == GridPadding::kZeros) zero = true;
                else if (p_.padding == GridPadding::kBorder) i = i < 0 ? 0 : p_.in[d] - 1;
                else i = static_cast<int64_t>(reflect(static_cast<double>(i), lo[d], hi[d]));
                if (i < 0 || i >= p_.in[d]) i = i < 0 ? 0 : p_.in[d] - 1;  // reflect's int() at the edge
              }
              at = at * p_.in[d] + i;
            }
            if (!zero) acc += w * x[at];
          }
          y[(b * p_.c + ch) * points + o] = static_cast<float>(acc);
        }
      }
    return Status::ok();
  }

 private:
  GridSampleParams p_;
};

/// AffineGrid: theta times each point's homogeneous normalised coordinates (x, y[, z], 1),
/// x along the last axis, in double, rounded once.
class AffineGridKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, affine_grid_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto k = static_cast<int64_t>(p_.spatial.size());
    const int64_t points = shape_numel(p_.spatial);
    const float* theta = src[0]->f32();
    float* y = dst[0]->f32();
    std::vector<double> coord(static_cast<size_t>(k) + 1, 1.0);  // x, y[, z], 1
    for (int64_t b = 0; b < p_.n; ++b)
      for (int64_t pt = 0; pt < points; ++pt) {
        for (int64_t d = k - 1, r = pt; d >= 0; --d) {  // axis d's coordinate goes to slot k - 1 - d
          const int64_t size = p_.spatial[static_cast<size_t>(d)];
          coord[static_cast<size_t>(k - 1 - d)] = affine_grid_coordinate(r % size, size, p_.align_corners);
          r /= size;
        }
        for (int64_t row = 0; row < k; ++row) {
          const float* t = theta + (b * k + row) * (k + 1);
          double v = 0;
          for (int64_t j = 0; j <= k; ++j) v += static_cast<double>(t[j]) * coord[static_cast<size_t>(j)];
          y[(b * points + pt) * k + row] = static_cast<float>(v);
        }
      }
    return Status::ok();
  }

 private:
  AffineGridParams p_;
};

}  // namespace

void add_grid_sample_kernel(BackendRegistration& r) {
  r.kernel("GridSample", make_factory<GridSampleKernel>());
  r.kernel("AffineGrid", make_factory<AffineGridKernel>());
}

}  // namespace mosaic
