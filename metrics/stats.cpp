#include "metrics/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mosaic {

double quantile_sorted(const std::vector<double>& s, double p) {
  if (s.empty()) return 0;
  const double pos = std::clamp(p, 0.0, 1.0) * static_cast<double>(s.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  if (i + 1 >= s.size()) return s.back();
  return s[i] + (pos - static_cast<double>(i)) * (s[i + 1] - s[i]);
}

MedianCiRanks median_ci_ranks(size_t n, double level) {
  // [x_(j), x_(n-j+1)] covers the median with probability P(j <= B <= n-j), B ~ Bin(n, 1/2),
  // = 1 - 2 P(B <= j-1). Take the largest j whose coverage still reaches `level`.
  MedianCiRanks r;
  if (n == 0) return r;
  const double nn = static_cast<double>(n);
  const double log_norm = std::lgamma(nn + 1) - nn * std::log(2.0);
  double below = 0;  // P(B <= j-1)
  for (size_t j = 1; 2 * j <= n + 1; ++j) {
    const double k = static_cast<double>(j - 1);
    below += std::exp(log_norm - std::lgamma(k + 1) - std::lgamma(nn - k + 1));
    const double coverage = 1 - 2 * below;
    if (coverage < level) break;
    r = {j, n - j + 1, coverage};
  }
  return r;
}

std::optional<double> SampleStats::rel_ci_half_width() const {
  if (!ci_low || !ci_high || median <= 0) return std::nullopt;
  return (*ci_high - *ci_low) / 2 / median;
}

SampleStats describe(std::vector<double> v) {
  SampleStats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0;
  s.median = quantile_sorted(v, 0.5);
  s.q1 = quantile_sorted(v, 0.25);
  s.q3 = quantile_sorted(v, 0.75);
  s.iqr = s.q3 - s.q1;
  s.p90 = quantile_sorted(v, 0.90);
  s.p99 = quantile_sorted(v, 0.99);
  const MedianCiRanks ranks = median_ci_ranks(v.size());
  if (ranks.lo > 0) {
    s.ci_low = v[ranks.lo - 1];
    s.ci_high = v[ranks.hi - 1];
    s.ci_coverage = ranks.coverage;
  }
  const double lo_fence = s.q1 - 1.5 * s.iqr, hi_fence = s.q3 + 1.5 * s.iqr;
  for (double x : v) s.outliers += x < lo_fence || x > hi_fence;
  const auto half = s.rel_ci_half_width();
  s.noisy = (half && *half > kNoisyRelHalfWidth) ||
            static_cast<double>(s.outliers) > kNoisyOutlierShare * static_cast<double>(s.n);
  return s;
}

}  // namespace mosaic
