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

EarlyStoppingRank early_stopping_rank(size_t n, double p, double confidence) {
  EarlyStoppingRank r;
  // With t = 0 the condition is p^n <= 1 - confidence.
  r.min_queries = static_cast<size_t>(std::ceil(std::log(1 - confidence) / std::log(p) - 1e-9));
  if (n == 0 || n < r.min_queries) return r;
  // The binomial CDF summed term by term in logs; the largest t whose CDF stays <= 1 - c.
  const double nn = static_cast<double>(n), q = 1 - p;
  const double log_n = std::lgamma(nn + 1);
  double cdf = 0;
  for (size_t t = 0; t < n; ++t) {
    const double k = static_cast<double>(t);
    cdf += std::exp(log_n - std::lgamma(k + 1) - std::lgamma(nn - k + 1) + k * std::log(q) + (nn - k) * std::log(p));
    if (cdf > 1 - confidence) break;
    r.overlatency = t;
    r.rank = n - t;
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

namespace mosaic {

double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.empty() || b.empty()) return std::nan("");
  const size_t na = a.size(), nb = b.size(), n = na + nb;
  std::vector<std::pair<double, bool>> all;  // value, from a
  all.reserve(n);
  for (double v : a) all.emplace_back(v, true);
  for (double v : b) all.emplace_back(v, false);
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  // Rank sum of a with mid-ranks for ties; the tie term sum(t^3 - t) corrects the variance.
  double rank_sum_a = 0, ties = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double mid = (static_cast<double>(i) + static_cast<double>(j) + 1) / 2;  // ranks i+1..j
    for (size_t k = i; k < j; ++k)
      if (all[k].second) rank_sum_a += mid;
    const double t = static_cast<double>(j - i);
    ties += t * t * t - t;
    i = j;
  }
  const double fa = static_cast<double>(na), fb = static_cast<double>(nb), fn = static_cast<double>(n);
  const double u = rank_sum_a - fa * (fa + 1) / 2;
  const double mean = fa * fb / 2;
  const double var = fa * fb / 12 * ((fn + 1) - ties / (fn * (fn - 1)));
  if (var <= 0) return 1;
  const double z = std::max(0.0, std::fabs(u - mean) - 0.5) / std::sqrt(var);
  return std::erfc(z / std::sqrt(2.0));
}

}  // namespace mosaic

namespace mosaic {
namespace {

/// Continued fraction of the incomplete beta function (modified Lentz), x < (a+1)/(a+b+2).
double beta_fraction(double a, double b, double x) {
  const double tiny = 1e-300;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 300; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    for (int step = 0; step < 2; ++step) {
      d = 1 + aa * d;
      if (std::fabs(d) < tiny) d = tiny;
      c = 1 + aa / c;
      if (std::fabs(c) < tiny) c = tiny;
      d = 1 / d;
      h *= d * c;
      aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
      if (step == 1 && std::fabs(d * c - 1) < 1e-15) return h;
    }
  }
  return h;
}

/// I_x(a, b), the regularized incomplete beta function.
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
  return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

}  // namespace

double student_t_p(double t, double df) {
  if (std::isnan(t) || !(df > 0)) return std::nan("");
  if (std::isinf(t)) return 0;
  return incomplete_beta(df / 2, 0.5, df / (df + t * t));
}

double welch_t_p(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return std::nan("");
  auto mean_var = [](const std::vector<double>& v) {
    const double n = static_cast<double>(v.size());
    const double m = std::accumulate(v.begin(), v.end(), 0.0) / n;
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return std::pair<double, double>{m, ss / (n - 1)};
  };
  const auto [ma, va] = mean_var(a);
  const auto [mb, vb] = mean_var(b);
  const double sa = va / static_cast<double>(a.size()), sb = vb / static_cast<double>(b.size());
  if (sa + sb <= 0) return ma == mb ? 1 : 0;
  const double t = (mb - ma) / std::sqrt(sa + sb);
  const double df = (sa + sb) * (sa + sb) /
                    (sa * sa / static_cast<double>(a.size() - 1) + sb * sb / static_cast<double>(b.size() - 1));
  return student_t_p(t, df);
}

}  // namespace mosaic
