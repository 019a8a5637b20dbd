// Post-training quantisation's range estimators (`mosaic quantize`, docs/quantization.md):
// which range [lo, hi] of a float tensor's values its 8-bit codes cover, chosen from the
// values the tensor takes over a calibration set.
//
//   minmax      the smallest and largest value seen.
//   percentile  the values at the (100 - p) / 2 and 100 - (100 - p) / 2 percentiles, read off
//               a histogram of kBins bins over [min, max]: p = 99.999 clips one value in
//               200,000 at each end.
//   entropy     the threshold t whose 8-bit encoding of a histogram of |x| (kBins bins over
//               [0, max |x|]) loses the least information: the Kullback-Leibler divergence
//               of the histogram clipped at t from its quantisation to 128 levels (256 where
//               the tensor is never negative) is smallest (the method of NVIDIA's TensorRT
//               calibrator, Migacz 2017). The range is [-t, t], or [0, t] for a tensor that is
//               never negative. Exact zeros are left out of the histogram: every range codes
//               them exactly, and a ReLU output's spike of them in the first bin would
//               otherwise pull t down to its least (fmnist-cnn's pooled ReLU: 0.22 of 1.2).
//
// Every range holds 0, so that zero (padding, ReLU's floor) is exactly representable.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

enum class CalibrationMethod { kMinMax, kPercentile, kEntropy };

/// "minmax", "percentile" or "entropy"; anything else is refused naming the three.
Expected<CalibrationMethod> parse_calibration_method(const std::string& name);
const char* calibration_method_name(CalibrationMethod m);

/// One tensor's statistics over the calibration set. Every batch is first shown to
/// observe_extent(); the histogram methods then see every batch again through
/// observe_histogram(), over the bins the extent fixed.
class RangeCollector {
 public:
  static constexpr int kBins = 2048;

  void observe_extent(const float* x, int64_t n);
  bool needs_histogram(CalibrationMethod m) const { return m != CalibrationMethod::kMinMax; }
  void observe_histogram(CalibrationMethod m, const float* x, int64_t n);
  /// The chosen range; an error (without the tensor's name, which the caller adds) when the
  /// tensor held a NaN or an infinity, or no value at all.
  Expected<std::pair<float, float>> range(CalibrationMethod m, double percentile) const;

  double min() const { return min_; }
  double max() const { return max_; }
  int64_t count() const { return count_; }

 private:
  double min_ = 0, max_ = 0;
  int64_t count_ = 0, nonfinite_ = 0;
  std::vector<double> hist_;  ///< kBins counts; over [min, max] (percentile) or [0, max |x|] (entropy)
};

/// The entropy method's threshold bin count: the i in [levels, bins] whose histogram
/// hist[0, i) (the tail summed into bin i - 1) quantised to `levels` levels has the least
/// Kullback-Leibler divergence from it. Exposed for tests.
int entropy_threshold_bins(const std::vector<double>& hist, int levels);

/// Signal to quantisation noise, in decibels: 10 log10(sum ref^2 / sum (got - ref)^2) over n
/// values; +infinity when they are equal, -infinity when ref is all zero and got is not.
double sqnr_db(const float* got, const float* ref, int64_t n);

}  // namespace mosaic
