// mosaic simulate: prints api::simulate's predictions (api/simulate.hpp), or measures a network
// profile under mpirun (--measure-network).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "api/simulate.hpp"
#include "ir/file_io.hpp"
#include "distributed/comm.hpp"
#include "distributed/data_parallel.hpp"
#include "distributed/net_measure.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"

namespace mosaic::cli {
namespace {

using nlohmann::json;

int measure_network_command(const SimulateOptions& o) {
  dist::MpiSession session;
  auto world = dist::Comm::world();
  if (!world.ok()) return fail(world.status());
  dist::Comm& comm = *world.value();
  if (comm.rank() == 0) {
    if (Status st = check_output_path(o.network_out, "--network-out"); !st.is_ok()) comm.abort(st.message(), 2);
  }
  auto m = dist::measure_network(comm, static_cast<int64_t>(o.max_mb * 1024 * 1024));
  if (!m.ok()) return fail(m.status());
  if (comm.rank() != 0) return 0;
  std::cout << m->table;
  if (Status st = dist::save_network(m->profile, o.network_out, m->samples_json); !st.is_ok()) return fail(st);
  std::cout << "network profile written to " << o.network_out << " (use: mosaic simulate ... --network " << o.network_out << ")\n";
  return 0;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

}  // namespace

int run_simulate(const SimulateOptions& o) {
  if (o.measure_network) return measure_network_command(o);
  if (o.input.empty()) return fail(Status::invalid("simulate needs a model or a training benchmark JSON (or --measure-network)"));
  if (!o.json.empty())
    if (Status st = check_output_path(o.json, "--json"); !st.is_ok()) return fail(st);
  SimulateQuery q = o;
  q.progress = &std::cerr;
  auto report = api::simulate(q);
  if (!report.ok())
    return fail(report.status());
  const json& r = report.value();
  const int64_t batch = r["batch"], profiled = r["profiled_batch"];
  const double scale = r["compute_scale"];
  std::printf("model %s  backend %s  batch %lld per rank%s  profile: %s\n", r["model"].get<std::string>().c_str(),
              r["backend"].get<std::string>().c_str(), static_cast<long long>(batch),
              profiled != batch ? (" (profiled at " + std::to_string(profiled) + ", compute scaled linearly)").c_str() : "",
              r["profile"].get<std::string>().c_str());
  const json& one = r["one_rank"];
  std::printf("one rank: forward+loss %.2f ms  backward %.2f ms  optimizer %.2f ms  = %.1f images/s%s\n",
              one["forward_loss_ms"].get<double>(), one["backward_ms"].get<double>(), one["optimizer_ms"].get<double>(),
              r["one_rank_images_per_s"].get<double>(),
              scale != 1 ? (" (measured " + fmt("%.1f", r["measured_images_per_s"].get<double>()) + ", compute scaled x" + fmt("%.3g", scale) + ")").c_str()
                         : "");
  std::printf("gradients %.2f MB in %zu bucket(s) of <= %.0f MB\n", r["gradient_bytes"].get<double>() / 1e6,
              r["buckets"].get<size_t>(), r["bucket_mb"].get<double>());
  const json &inter = r["network"], &intra = r["intra_network"];
  std::printf("network: %s (%s): latency %.2f us, %.2f GB/s%s, reduction %.2f GB/s\n", inter["name"].get<std::string>().c_str(),
              inter["source"].get<std::string>().c_str(), 1e6 * inter["latency_s"].get<double>(),
              inter["bandwidth_bps"].get<double>() / 1e9, inter["cpu_driven"].get<bool>() ? ", CPU-driven" : "",
              intra["reduce_bps"].get<double>() / 1e9);
  if (intra["name"] != inter["name"])
    std::printf("within a node: %s: latency %.2f us, %.2f GB/s%s\n", intra["name"].get<std::string>().c_str(),
                1e6 * intra["latency_s"].get<double>(), intra["bandwidth_bps"].get<double>() / 1e9,
                intra["cpu_driven"].get<bool>() ? ", CPU-driven" : "");
  std::string mode;
  for (const json& p : r["predictions"]) {
    if (p["mode"] != mode) {
      mode = p["mode"];
      std::printf("\n== %s ==\n%-8s %6s %7s %10s %10s %10s %10s %7s %11s %8s %6s  %-18s %s\n", mode.c_str(), "group", "ranks",
                  "workers", "step ms", "compute", "comm", "exposed", "comm%", "images/s", "speedup", "eff.", "collective",
                  "bound");
    }
    if (p.contains("error")) {
      std::printf("%-8s %6d  %s\n", p["group"].get<std::string>().c_str(), p["ranks"].get<int>(),
                  p["error"].get<std::string>().c_str());
      continue;
    }
    std::printf("%-8s %6d %7d %10.2f %10.2f %10.2f %10.2f %6.1f%% %11.1f %7.2fx %5.0f%%  %-18s %s\n",
                p["group"].get<std::string>().c_str(), p["ranks"].get<int>(), p["workers"].get<int>(),
                p["step_ms"].get<double>(), p["compute_ms"].get<double>(), p["comm_ms"].get<double>(),
                p["exposed_ms"].get<double>(), 100 * p["comm_share"].get<double>(), p["images_per_s"].get<double>(),
                p["speedup"].get<double>(), 100 * p["efficiency"].get<double>(),
                p["collective"].get<std::string>().c_str(), p["bound"].get<std::string>().c_str());
  }
  if (!o.json.empty()) {
    if (Status st = write_file_atomic(o.json, r.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  return 0;
}

}  // namespace mosaic::cli
