#include "metrics/peaks.hpp"
#include "ir/file_io.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/events.hpp"
#include "metrics/benchmark.hpp"
#include "metrics/provenance.hpp"
#include "metrics/report.hpp"

namespace mosaic {

std::string cache_dir() {
  if (const char* d = std::getenv("MOSAIC_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/mosaic";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/mosaic";
  return "/tmp/mosaic-cache";
}

namespace {

/// Busy jiffies of all CPUs (user, nice, system, irq, softirq, steal), or -1.
long long busy_jiffies() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  long long user, nice, system, idle, iowait, irq, softirq, steal = 0;
  if (!(f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq) || cpu != "cpu") return -1;
  f >> steal;
  return user + nice + system + irq + softirq + steal;
}

}  // namespace

void OthersCpuMeter::start() {
  busy0_ = busy_jiffies();
  self0_ns_ = process_cpu_ns();
  wall0_ns_ = now_ns();
}

void OthersCpuMeter::stop() {
  const long long busy1 = busy_jiffies();
  const long hz = sysconf(_SC_CLK_TCK);
  if (busy0_ < 0 || busy1 < 0 || hz <= 0) {
    known_ = false;
    return;
  }
  others_s_ += static_cast<double>(busy1 - busy0_) / static_cast<double>(hz) -
               static_cast<double>(process_cpu_ns() - self0_ns_) / 1e9;
  wall_s_ += static_cast<double>(now_ns() - wall0_ns_) / 1e9;
}

double OthersCpuMeter::share() const {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (!known_ || wall_s_ <= 0 || cpus <= 0) return -1;
  return std::clamp(others_s_ / (wall_s_ * static_cast<double>(cpus)), 0.0, 1.0);
}

double others_cpu_share_during(const std::function<void()>& work) {
  OthersCpuMeter meter;
  meter.start();
  work();
  meter.stop();
  return meter.share();
}

std::vector<std::string> peak_sanity_notes(const BenchReport& report) {
  std::vector<std::string> notes;
  const std::string advice =
      report.peaks.from_cache ? "the cached peaks were probably measured under load: rerun with --refresh-peaks on a quiet machine"
                              : "the peaks were probably measured under load: rerun on a quiet machine";
  for (const auto& c : report.configs) {
    // A configuration against its own arithmetic's peak: bfloat16 matmuls for bf16.
    const bool bf16 = c.precision == "bf16";
    const double peak = bf16 ? report.peaks.bf16_gemm_gflops : report.peaks.sgemm_gflops;
    const std::string of = bf16 ? " of the bf16 matmul peak" : " of the sgemm peak";
    if (peak <= 0) continue;
    auto pct = [&](double g) {
      char b[32];
      std::snprintf(b, sizeof b, "%.0f%%", 100 * g / peak);
      return std::string(b);
    };
    if (c.gflops > 1.05 * peak) notes.push_back(c.label + " ran at " + pct(c.gflops) + of + "; " + advice);
    std::string nodes;
    int count = 0;
    for (const auto& n : c.nodes)
      if (!n.view && n.device.empty() && n.gflops > 1.05 * peak) {
        if (count++ < 3) nodes += (nodes.empty() ? "" : ", ") + n.name + " " + pct(n.gflops);
      }
    if (count > 0)
      notes.push_back(c.label + ": " + std::to_string(count) + " node(s) above 105%" + of + " (" + nodes +
                      (count > 3 ? ", ..." : "") +
                      "); either the peaks are understated or the kernel does less arithmetic than the schema "
                      "counts (Winograd, for example)");
  }
  return notes;
}

namespace {

MachinePeaks from_entry(const nlohmann::json& e) {
  MachinePeaks p;
  p.sgemm_gflops = e["sgemm_gflops"];
  p.openblas_sgemm_gflops = e.value("openblas_sgemm_gflops", 0.0);
  p.onednn_sgemm_gflops = e.value("onednn_sgemm_gflops", 0.0);
  p.bandwidth_gbs = e["bandwidth_gbs"];
  p.read_bandwidth_gbs = e.value("read_bandwidth_gbs", 0.0);
  p.measured_utc = e.value("measured_utc", "");
  p.others_cpu = e.value("others_cpu", -1.0);
  return p;
}

bool usable(const nlohmann::json& e) {
  // An entry from before the read stream was measured is measured again.
  return e.is_object() && e.value("sgemm_gflops", 0.0) > 0 && e.value("bandwidth_gbs", 0.0) > 0 &&
         e.value("read_bandwidth_gbs", 0.0) > 0;
}

}  // namespace

MachinePeaks load_or_measure_peaks(const std::string& key, const std::function<MachinePeaks()>& measure, bool refresh,
                                   bool store) {
  namespace fs = std::filesystem;
  const std::string file = cache_dir() + "/peaks.json";
  nlohmann::json all = nlohmann::json::object();
  {
    std::ifstream f(file);
    if (f) all = nlohmann::json::parse(f, nullptr, false);
    if (!all.is_object()) all = nlohmann::json::object();
  }
  const bool cached = all.contains(key) && usable(all[key]);
  if (!refresh && cached) {
    MachinePeaks p = from_entry(all[key]);
    p.key = key;
    p.from_cache = true;
    p.cache_file = file;
    return p;
  }
  MachinePeaks p = measure();
  p.key = key;
  p.cache_file = file;
  p.measured_utc = utc_now_iso8601();
  const bool contended = p.others_cpu > kPeaksContended;
  if (contended && cached) {
    const MachinePeaks old = from_entry(all[key]);
    if (old.others_cpu >= 0 && old.others_cpu <= kPeaksContended) {
      // A refresh beside other work would replace a quiet measurement with an understated one.
      MachinePeaks kept = old;
      kept.key = key;
      kept.from_cache = true;
      kept.cache_file = file;
      kept.kept_over_contended = p.others_cpu;
      return kept;
    }
  }
  if (!store) return p;  // measured for this run only (e.g. more threads than cores)
  all[key] = {{"sgemm_gflops", p.sgemm_gflops}, {"openblas_sgemm_gflops", p.openblas_sgemm_gflops},
              {"onednn_sgemm_gflops", p.onednn_sgemm_gflops}, {"bandwidth_gbs", p.bandwidth_gbs},
              {"read_bandwidth_gbs", p.read_bandwidth_gbs}, {"measured_utc", p.measured_utc}, {"others_cpu", p.others_cpu}};
  // Written to a temporary file and renamed: concurrent runs never see half a file.
  std::error_code ec;
  fs::create_directories(cache_dir(), ec);
  (void)write_file_atomic(file, all.dump(2) + "\n");
  return p;
}

}  // namespace mosaic
