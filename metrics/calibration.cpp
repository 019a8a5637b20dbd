#include "metrics/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mosaic {

Expected<CalibrationMethod> parse_calibration_method(const std::string& name) {
  if (name == "minmax") return CalibrationMethod::kMinMax;
  if (name == "percentile") return CalibrationMethod::kPercentile;
  if (name == "entropy") return CalibrationMethod::kEntropy;
  return Status::invalid("calibration method '" + name + "': expected minmax, percentile or entropy");
}

const char* calibration_method_name(CalibrationMethod m) {
  switch (m) {
    case CalibrationMethod::kMinMax: return "minmax";
    case CalibrationMethod::kPercentile: return "percentile";
    case CalibrationMethod::kEntropy: return "entropy";
  }
  return "?";
}

void RangeCollector::observe_extent(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (!std::isfinite(v)) {
      ++nonfinite_;
      continue;
    }
    if (count_ == 0) min_ = max_ = v;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
    ++count_;
  }
}

void RangeCollector::observe_histogram(CalibrationMethod m, const float* x, int64_t n) {
  if (hist_.empty()) hist_.assign(kBins, 0.0);
  // percentile: [min, max]; entropy: [0, max |x|].
  const bool magnitude = m == CalibrationMethod::kEntropy;
  const double lo = magnitude ? 0.0 : min_;
  const double hi = magnitude ? std::max(std::fabs(min_), std::fabs(max_)) : max_;
  const double width = (hi - lo) / kBins;
  for (int64_t i = 0; i < n; ++i) {
    double v = x[i];
    if (!std::isfinite(v)) continue;
    // Exact zeros (ReLU's floor, padding) are coded exactly by every range: entropy leaves
    // them out, or their spike in the first bin decides the threshold.
    if (magnitude && v == 0) continue;
    if (magnitude) v = std::fabs(v);
    const int64_t b = width > 0 ? static_cast<int64_t>((v - lo) / width) : 0;
    hist_[static_cast<size_t>(std::clamp<int64_t>(b, 0, kBins - 1))] += 1;
  }
}

namespace {

/// [lo, hi] widened to hold 0.
std::pair<float, float> with_zero(double lo, double hi) {
  return {static_cast<float>(std::min(lo, 0.0)), static_cast<float>(std::max(hi, 0.0))};
}

}  // namespace

Expected<std::pair<float, float>> RangeCollector::range(CalibrationMethod m, double percentile) const {
  if (nonfinite_ > 0)
    return Status::invalid("held " + std::to_string(nonfinite_) + " NaN or infinite value(s) on the calibration data");
  if (count_ == 0) return Status::invalid("took no value on the calibration data");
  if (m == CalibrationMethod::kMinMax || hist_.empty()) return with_zero(min_, max_);
  if (m == CalibrationMethod::kPercentile) {
    const double width = (max_ - min_) / kBins;
    const double total = static_cast<double>(count_), tail = total * (1.0 - percentile / 100.0) / 2.0;
    int first = 0, last = kBins - 1;
    for (double seen = 0; first < kBins - 1 && (seen += hist_[static_cast<size_t>(first)]) <= tail;) ++first;
    for (double seen = 0; last > 0 && (seen += hist_[static_cast<size_t>(last)]) <= tail;) --last;
    if (last < first) last = first;
    return with_zero(min_ + first * width, min_ + (last + 1) * width);
  }
  const double amax = std::max(std::fabs(min_), std::fabs(max_));
  const bool nonnegative = min_ >= 0;
  const int bins = entropy_threshold_bins(hist_, nonnegative ? 256 : 128);
  const double t = amax * bins / kBins;
  return nonnegative ? with_zero(0.0, t) : with_zero(-t, t);
}

int entropy_threshold_bins(const std::vector<double>& hist, int levels) {
  const int n = static_cast<int>(hist.size());
  if (n <= levels) return n;
  std::vector<double> tail(static_cast<size_t>(n) + 1, 0.0);  // tail[i] = sum hist[i, n)
  for (int i = n - 1; i >= 0; --i) tail[static_cast<size_t>(i)] = tail[static_cast<size_t>(i) + 1] + hist[static_cast<size_t>(i)];
  int best = n;
  double best_kl = std::numeric_limits<double>::infinity();
  std::vector<double> q(static_cast<size_t>(n));
  for (int i = levels; i <= n; ++i) {
    // P: the histogram clipped at bin i, its tail counted in the last bin kept. Q: the bins
    // below i (without the tail) merged into `levels` groups, each group's count spread over
    // its non-empty bins: what an encoding with `levels` codes over [0, i) can tell apart.
    const double p_total = tail[0];
    if (p_total <= 0) return n;
    double q_total = 0;
    for (int j = 0; j < levels; ++j) {
      const int start = static_cast<int>(static_cast<int64_t>(j) * i / levels);
      const int end = static_cast<int>(static_cast<int64_t>(j + 1) * i / levels);
      double sum = 0;
      int nonzero = 0;
      for (int k = start; k < end; ++k) {
        sum += hist[static_cast<size_t>(k)];
        nonzero += hist[static_cast<size_t>(k)] != 0;
      }
      for (int k = start; k < end; ++k)
        q[static_cast<size_t>(k)] = hist[static_cast<size_t>(k)] != 0 ? sum / nonzero : 0.0;
      q_total += sum;
    }
    if (q_total <= 0) continue;
    // Bins where P has mass and Q none (the last bin when only the tail fills it) get a
    // small share, taken evenly from Q's non-empty bins, so the divergence stays finite.
    constexpr double kEps = 1e-4;
    auto p_of = [&](int k) {
      return (hist[static_cast<size_t>(k)] + (k == i - 1 ? tail[static_cast<size_t>(i)] : 0.0)) / p_total;
    };
    int starved = 0, filled = 0;
    for (int k = 0; k < i; ++k) {
      starved += q[static_cast<size_t>(k)] == 0 && p_of(k) > 0;
      filled += q[static_cast<size_t>(k)] != 0;
    }
    const double take = starved > 0 && filled > 0 ? kEps * starved / filled : 0.0;
    double kl = 0;
    for (int k = 0; k < i; ++k) {
      const double p = p_of(k);
      if (p <= 0) continue;
      const double qk = q[static_cast<size_t>(k)] / q_total;
      const double qs = qk == 0 ? kEps : qk - take;
      kl += p * std::log(p / std::max(qs, 1e-300));
    }
    if (kl < best_kl) {
      best_kl = kl;
      best = i;
    }
  }
  return best;
}

double sqnr_db(const float* got, const float* ref, int64_t n) {
  double signal = 0, noise = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = ref[i], d = static_cast<double>(got[i]) - r;
    signal += r * r;
    noise += d * d;
  }
  if (noise == 0) return std::numeric_limits<double>::infinity();
  if (signal == 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

}  // namespace mosaic
