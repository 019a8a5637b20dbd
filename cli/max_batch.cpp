// `mosaic bench MODEL --find-max-batch [--memory-limit X]`: prints api::find_max_batch's
// search (api/max_batch.hpp) per configuration as it is found, and writes --json.
#include <cstdio>
#include <string>

#include "api/max_batch.hpp"
#include "ir/file_io.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "metrics/report.hpp"

namespace mosaic::cli {

using nlohmann::json;

int run_find_max_batch(const BenchOptions& o) {
  bool all_ok = true;
  auto bytes = [](const json& v) { return format_bytes(v.get<double>()); };
  auto report = api::find_max_batch(o, [&](const json& doc, const json& c) {
    if (doc["configs"].size() == 1) {
      const std::string source = o.memory_limit.empty() ? doc["limit_source"].get<std::string>() : "--memory-limit " + o.memory_limit;
      std::printf("largest batch of %s (%s) within %s (%s)\n", o.model.c_str(), o.mode.c_str(),
                  bytes(doc["limit_bytes"]).c_str(), source.c_str());
      std::printf("%-10s %10s %10s %14s %14s %16s %6s  %s\n", "backend", "max batch", "predicted", "accounted", "RSS growth",
                  "at max+1 (plan)", "runs", "max+1 refused by");
    }
    const std::string label = c["label"];
    if (!c["error"].is_null()) {
      std::printf("%-10s %s\n", label.c_str(), c["error"].get<std::string>().c_str());
      all_ok = false;
      return;
    }
    const std::string by = c["limited_by"];
    const std::string refused = by == "accounting"         ? "the plan accounting"
                                : by == "available memory" ? "the memory available now (no real run tried)"
                                : by == "device memory"    ? "a real run on " + c["device"].get<std::string>()
                                                           : "a real run (RSS growth " + bytes(c["next_rss_growth_bytes"]) + ")";
    if (!c["device"].is_null())  // bounded by the device's memory, not the host's
      std::printf("%s computes on %s: within %s of its memory (%s; accounted: what the plan holds there)\n",
                  label.c_str(), c["device"].get<std::string>().c_str(), bytes(c["device_limit_bytes"]).c_str(),
                  o.memory_limit.empty() ? "90% of what it has free" : "--memory-limit");
    std::printf("%-10s %10lld %10lld %14s %14s %16s %6d  %s%s\n", label.c_str(), c["max_batch"].get<long long>(),
                c["predicted"].get<long long>(), bytes(c["accounted_bytes"]).c_str(), bytes(c["rss_growth_bytes"]).c_str(),
                bytes(c["next_accounted_bytes"]).c_str(), c["confirming_runs"].get<int>(), refused.c_str(),
                c["note"].is_null() ? "" : ("; " + c["note"].get<std::string>()).c_str());
  });
  if (!report.ok()) return fail(report.status());
  std::printf("(accounted: weights + activations + workspace%s; confirmed by running that batch once)\n",
              o.mode == "training" ? " + gradients + optimizer state" : "");
  if (!o.json.empty()) {
    if (Status st = write_file_atomic(o.json, report->dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  return all_ok ? 0 : 1;
}

}  // namespace mosaic::cli
