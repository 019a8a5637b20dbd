// Machine peaks (sgemm GFLOP/s, memory GB/s), measured once per machine and thread count and
// cached in a JSON file, so every bench can report "% of peak" and a roofline without paying
// for the probe (docs/metrics.md, "Peaks and roofline").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

struct MachinePeaks {
  double sgemm_gflops = 0;  ///< the best of the libraries' GEMMs below
  double openblas_sgemm_gflops = 0, onednn_sgemm_gflops = 0;
  /// oneDNN's matmul of bfloat16 operands into float32: the peak of bf16 plans (their %peak),
  /// measured by a run that has one (not cached); 0: not measured.
  double bf16_gemm_gflops = 0;
  double bandwidth_gbs = 0;  ///< the triad's
  /// Reading alone, as a weight stream is read (machine_probe.hpp): what a decode step at
  /// batch 1 is held to (api/generate.hpp's bandwidth share).
  double read_bandwidth_gbs = 0;
  std::string key;        ///< what the peaks depend on: CPU, threads, OpenBLAS core
  std::string measured_utc;
  /// Share of the machine's CPU time that other processes used while the probe ran (0..1;
  /// negative when unknown, e.g. a cache entry written before it was recorded). Above
  /// kPeaksContended the peaks are understated, and every report that uses them says so.
  double others_cpu = -1;
  /// A refresh measured under load (this share of other CPU) and kept the quiet cached peaks
  /// instead; negative otherwise.
  double kept_over_contended = -1;
  bool from_cache = false;
  std::string cache_file;
};

/// Above this share of other processes' CPU during the probe, the peaks are called contended.
constexpr double kPeaksContended = 0.10;

/// Measures how much of the machine's CPU time (all cores, from /proc/stat) processes other
/// than this one use between start() and stop(), over any number of such intervals: a timed
/// run beside other work is slowed by it. Two /proc/stat reads per interval.
class OthersCpuMeter {
 public:
  void start();
  void stop();
  /// Share 0..1 over the intervals so far; negative when unknown (no /proc/stat, no interval).
  double share() const;

 private:
  long long busy0_ = -1;
  int64_t self0_ns_ = 0, wall0_ns_ = 0;
  double others_s_ = 0, wall_s_ = 0;
  bool known_ = true;
};

/// Runs `work` and returns the share of the machine's CPU time (all cores, from /proc/stat)
/// that processes other than this one used meanwhile; negative when /proc/stat is unreadable.
double others_cpu_share_during(const std::function<void()>& work);

/// Notes for a report whose figures exceed the peaks they are divided by (over 105% of the
/// sgemm peak): the peaks were then measured under load, or the kernel does less arithmetic
/// than the schema counts (Winograd, for example). Empty when every figure is below.
struct BenchReport;
std::vector<std::string> peak_sanity_notes(const BenchReport& report);

/// $MOSAIC_CACHE_DIR, else $XDG_CACHE_HOME/mosaic, else $HOME/.cache/mosaic, else /tmp/mosaic-cache.
std::string cache_dir();

/// The cached peaks for `key`, or `measure()`d and stored (refresh: always measure). A cache
/// that cannot be read or written is not an error: the peaks are measured and used. A
/// contended measurement (others_cpu > kPeaksContended) never replaces a quiet cached one.
/// store = false measures without writing the cache (a run with more threads than cores must not
/// leave its figures as the machine's).
MachinePeaks load_or_measure_peaks(const std::string& key, const std::function<MachinePeaks()>& measure,
                                   bool refresh = false, bool store = true);

}  // namespace mosaic
