// Descriptive statistics of timing samples: quantiles, a distribution-free confidence interval
// of the median, Tukey outliers and a "noisy" verdict. Definitions in docs/metrics.md.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

namespace mosaic {

struct SampleStats {
  size_t n = 0;
  double min = 0, max = 0, mean = 0, stddev = 0;
  double median = 0, q1 = 0, q3 = 0, iqr = 0, p90 = 0, p99 = 0;
  /// 95% confidence interval of the median from order statistics (binomial, no distribution
  /// assumed). Empty when the sample is too small for 95% coverage (n < 6).
  std::optional<double> ci_low, ci_high;
  double ci_coverage = 0;  ///< the interval's exact coverage (>= 0.95), 0 when there is none
  int outliers = 0;        ///< samples outside [q1 - 1.5 iqr, q3 + 1.5 iqr]
  bool noisy = false;      ///< see kNoisyRelHalfWidth and kNoisyOutlierShare

  /// Half the CI width over the median; empty when there is no interval.
  std::optional<double> rel_ci_half_width() const;
};

/// A run is noisy when the CI of its median is wider than +-5% of the median ...
inline constexpr double kNoisyRelHalfWidth = 0.05;
/// ... or more than 10% of its samples are outliers.
inline constexpr double kNoisyOutlierShare = 0.10;

/// Statistics of a sample (taken by value: sorted internally). An empty sample gives n = 0.
SampleStats describe(std::vector<double> samples);

/// Quantile p in [0, 1] of a sorted sample, linear between order statistics (Hyndman-Fan
/// type 7, numpy's default). 0 for an empty sample.
double quantile_sorted(const std::vector<double>& sorted, double p);

/// Ranks (1-based, lo <= hi) of the order statistics bounding a distribution-free confidence
/// interval of the median with coverage >= `level`, and that coverage; {0, 0, 0} when n is too
/// small for it.
struct MedianCiRanks {
  size_t lo = 0, hi = 0;
  double coverage = 0;
};
MedianCiRanks median_ci_ranks(size_t n, double level = 0.95);

/// MLPerf LoadGen's early-stopping estimate of percentile p from n latencies: the order
/// statistic x_(n - t) (1-based rank `rank`, the (t+1)-th largest) for the largest number t
/// of queries above it such that P(Bin(n, 1 - p) <= t) <= 1 - confidence: if the true
/// p-quantile were below x_(n-t), more than t queries would exceed it with probability at
/// least `confidence`. rank 0 when n is too small even for t = 0 (n < min_queries).
struct EarlyStoppingRank {
  size_t rank = 0;         ///< 1-based order statistic; 0: none
  size_t overlatency = 0;  ///< t
  size_t min_queries = 0;  ///< the fewest queries that give an estimate: ceil(log(1-c) / log(p))
};
EarlyStoppingRank early_stopping_rank(size_t n, double p, double confidence = 0.99);

}  // namespace mosaic

namespace mosaic {

/// Two-sided p-value of the Mann-Whitney U (Wilcoxon rank-sum) test that samples `a` and
/// `b` come from one distribution: normal approximation with tie and continuity corrections,
/// valid from about 8 samples each. 1 when every value is equal; NaN when either is empty.
double mann_whitney_p(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mosaic

namespace mosaic {

/// Two-sided p-value of Student's t distribution with `df` degrees of freedom at `t`
/// (regularized incomplete beta function).
double student_t_p(double t, double df);

/// Two-sided p-value of Welch's unequal-variance t-test that `a` and `b` have one mean;
/// NaN with fewer than 2 values in either; 1 when both are constant and equal, 0 when both
/// are constant and differ.
double welch_t_p(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mosaic
