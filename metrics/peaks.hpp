// Machine peaks (sgemm GFLOP/s, memory GB/s), measured once per machine and thread count and
// cached in a JSON file, so every bench can report "% of peak" and a roofline without paying
// for the probe (docs/metrics.md, "Peaks and roofline").
#pragma once

#include <functional>
#include <string>

#include "core/status.hpp"

namespace mosaic {

struct MachinePeaks {
  double sgemm_gflops = 0;  ///< the best of the libraries' GEMMs below
  double openblas_sgemm_gflops = 0, onednn_sgemm_gflops = 0;
  double bandwidth_gbs = 0;
  std::string key;        ///< what the peaks depend on: CPU, threads, OpenBLAS core
  std::string measured_utc;
  bool from_cache = false;
  std::string cache_file;
};

/// $MOSAIC_CACHE_DIR, else $XDG_CACHE_HOME/mosaic, else $HOME/.cache/mosaic, else /tmp/mosaic-cache.
std::string cache_dir();

/// The cached peaks for `key`, or `measure()`d and stored (refresh: always measure). A cache
/// that cannot be read or written is not an error: the peaks are measured and used.
MachinePeaks load_or_measure_peaks(const std::string& key, const std::function<MachinePeaks()>& measure,
                                   bool refresh = false);

}  // namespace mosaic
