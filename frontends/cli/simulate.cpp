// mosaic simulate: predicted data-parallel throughput, speed-up and communication share for
// 1 to 1024 ranks, from a measured single-rank training profile, the real bucket schedule and
// a network profile (a preset, or one measured with --measure-network under mpirun).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "distributed/buckets.hpp"
#include "core/file_io.hpp"
#include "distributed/cost_model.hpp"
#include "distributed/data_parallel.hpp"
#include "distributed/net_measure.hpp"
#include "frontends/cli/cli_util.hpp"
#include "frontends/cli/commands.hpp"

namespace mosaic::cli {
namespace {

using nlohmann::json;
using dist::StepProfile;

/// The single-rank profile from a `bench --mode training --json` document.
Expected<StepProfile> profile_from_bench(const json& doc, const std::string& file, const std::string& backend,
                                         double bucket_mb) {
  if (doc.value("schema", "") != "mosaic.bench/2" || doc.value("mode", "") != "training")
    return Status::invalid(file + ": not a training benchmark (need the --json of 'mosaic bench MODEL --mode training')");
  if (!doc.contains("runs") || !doc["runs"].is_array() || doc["runs"].empty())
    return Status::invalid(file + ": no runs in the benchmark report");
  const json* run = nullptr;
  for (const auto& r : doc["runs"])
    if (r.value("label", "") == backend || doc["runs"].size() == 1) run = &r;
  if (!run) return Status::invalid(file + ": no run labelled '" + backend + "' (use --backend)");
  if (!run->contains("summary") || !run->contains("nodes") || !(*run)["nodes"].is_array())
    return Status::invalid(file + ": run '" + run->value("label", "") + "' has no summary or node list");
  if (!run->contains("gradients") || !(*run)["gradients"].is_array())
    return Status::invalid(file + ": run '" + run->value("label", "") +
                           "' has no gradient list (written by an older mosaic; benchmark again)");
  StepProfile p;
  p.model = doc.value("model", file);
  p.backend = run->value("label", backend);
  p.batch = doc.value("batch", int64_t{0});
  const json& sum = (*run)["summary"];
  auto ms = [&](const char* key) -> double { return sum.contains(key) && sum[key].is_number() ? sum[key].get<double>() / 1e3 : 0.0; };
  p.forward_s = ms("forward_ms");
  p.loss_s = ms("loss_ms");
  p.optimizer_s = ms("optimizer_ms");
  const double backward_s = ms("backward_ms");
  if (p.batch <= 0 || p.forward_s <= 0 || backward_s <= 0)
    return Status::invalid(file + ": the training run has no batch, forward or backward time");
  // Backward time per step from the per-node medians, scaled to the measured backward stage
  // (which also holds gradient accumulation and seeding between nodes).
  double node_sum = 0;
  for (const auto& n : (*run)["nodes"]) {
    const double us = n.contains("backward_median_us") && n["backward_median_us"].is_number() ? n["backward_median_us"].get<double>() : 0;
    p.backward_step_s.push_back(us / 1e6);
    node_sum += us / 1e6;
  }
  for (double& v : p.backward_step_s) v = node_sum > 0 ? v * backward_s / node_sum : backward_s / static_cast<double>(p.backward_step_s.size());
  std::vector<int64_t> bytes;
  std::vector<int> final_step;
  for (const auto& g : (*run)["gradients"]) {
    bytes.push_back(g.value("bytes", int64_t{0}));
    const int s = g.value("final_step", -1);
    if (s >= static_cast<int>(p.backward_step_s.size()))
      return Status::invalid(file + ": gradient '" + g.value("name", "") + "' names step " + std::to_string(s) + " of " +
                             std::to_string(p.backward_step_s.size()));
    final_step.push_back(s);
  }
  for (const auto& b : dist::plan_buckets(bytes, final_step, static_cast<int64_t>(bucket_mb * 1024 * 1024)))
    p.buckets.push_back({b.bytes, b.ready_after_step});
  return p;
}

/// Profiles `model` with o.profile_concurrency training benchmarks at once, in child
/// processes of this binary; returns the slowest one's report.
Expected<json> measure_profile(const SimulateOptions& o) {
  const std::string base = std::filesystem::temp_directory_path().string() + "/mosaic-simulate-" + std::to_string(getpid());
  const int k = std::max(o.profile_concurrency, 1);
  std::cerr << "profiling " << o.input << " on " << o.backend << " (training, batch " << o.batch << ", " << o.threads
            << " thread(s), " << o.iterations << " steps" << (k > 1 ? ", " + std::to_string(k) + " at once" : "") << ")...\n";
  std::vector<int> codes(static_cast<size_t>(k), -1);
  std::vector<std::thread> children;
  for (int i = 0; i < k; ++i)
    children.emplace_back([&, i] {
      const std::string out = base + "-" + std::to_string(i) + ".json";
      std::vector<std::string> args{"mosaic", "bench", o.input, "--mode", "training", "--backends", o.backend,
                                    "--batch", std::to_string(o.batch), "--threads", std::to_string(o.threads),
                                    "--iterations", std::to_string(o.iterations), "--warmup", std::to_string(o.warmup),
                                    "--no-check", "--no-db", "--no-peaks", "--json", out};
      append_plugin_arguments(args);
      codes[static_cast<size_t>(i)] = run_program("/proc/self/exe", args, base + "-" + std::to_string(i) + ".log");
    });
  for (auto& t : children) t.join();
  json slowest;
  Status status = Status::ok();
  for (int i = 0; i < k; ++i) {
    const std::string out = base + "-" + std::to_string(i) + ".json", log = base + "-" + std::to_string(i) + ".log";
    if (codes[static_cast<size_t>(i)] != 0 && status.is_ok()) {
      std::ifstream l(log);
      std::string line, why;
      while (std::getline(l, line))
        if (line.find("error") != std::string::npos) why = line;
      status = Status::invalid("profiling " + o.input + " failed (exit " + std::to_string(codes[static_cast<size_t>(i)]) + ")" +
                               (why.empty() ? "" : ": " + why));
    }
    std::ifstream f(out);
    json doc = f ? json::parse(f, nullptr, false) : json();
    auto ips = [](const json& d) { return d["runs"][0]["summary"].value("images_per_s", 0.0); };
    if (doc.is_object() && doc.contains("runs") && !doc["runs"].empty() && (slowest.is_null() || ips(doc) < ips(slowest)))
      slowest = std::move(doc);
    std::filesystem::remove(out);
    std::filesystem::remove(log);
  }
  if (!status.is_ok()) return status;
  if (slowest.is_null()) return Status::internal("profiling " + o.input + " wrote no report");
  return slowest;
}

/// "2n8c" -> (2, 4): nodes and ranks per node (c counts ranks over all nodes, as in seed 001).
Expected<std::pair<int, int>> parse_group(const std::string& g) {
  static const std::regex re("([0-9]+)n([0-9]+)c");
  std::smatch m;
  if (!std::regex_match(g, m, re)) return Status::invalid("--groups: '" + g + "' is not NnMc (e.g. 2n8c: 2 nodes, 8 ranks)");
  const int nodes = std::stoi(m[1]), ranks = std::stoi(m[2]);
  if (nodes < 1 || ranks < nodes || ranks % nodes != 0)
    return Status::invalid("--groups: '" + g + "' needs a whole number of ranks per node");
  return std::make_pair(nodes, ranks / nodes);
}

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
  for (const auto& m : o.modes) {
    bool known = false;
    std::vector<std::string> names;
    for (const auto& [name, what] : dist::distributed_modes()) names.push_back(name), known = known || name == m;
    if (!known) return fail(Status::invalid("--mode: unknown mode '" + m + "' (" + join(names) + ")"));
  }
  auto collective = dist::parse_collective(o.collective);
  if (!collective.ok()) return fail(collective.status());
  auto inter = dist::load_network(o.network);
  if (!inter.ok()) return fail(inter.status().with_context("--network"));
  auto intra = dist::load_network(o.intra.empty() ? o.network : o.intra);
  if (!intra.ok()) return fail(intra.status().with_context("--intra"));
  if (!o.json.empty())
    if (Status st = check_output_path(o.json, "--json"); !st.is_ok()) return fail(st);
  std::vector<std::pair<int, int>> layouts;  // (nodes, ranks per node)
  std::vector<std::string> labels;
  if (!o.groups.empty()) {
    for (const auto& g : o.groups) {
      auto p = parse_group(g);
      if (!p.ok()) return fail(p.status());
      layouts.push_back(p.value());
      labels.push_back(g);
    }
  } else {
    for (int n : o.ranks) {
      if (n < 1) return fail(Status::invalid("--ranks: " + std::to_string(n) + " is not a positive rank count"));
      const int per = std::min(n, std::max(o.ranks_per_node, 1));
      if (n % per != 0)
        return fail(Status::invalid("--ranks " + std::to_string(n) + " is not a multiple of --ranks-per-node " + std::to_string(per)));
      layouts.emplace_back(n / per, per);
      labels.push_back(std::to_string(n / per) + "n" + std::to_string(n) + "c");
    }
  }

  // The profile: a benchmark JSON as given, or measured now.
  json doc;
  std::string source = o.input;
  if (o.input.size() > 5 && o.input.substr(o.input.size() - 5) == ".json") {
    std::ifstream f(o.input);
    if (!f) return fail(Status::not_found(o.input + ": cannot open"));
    doc = json::parse(f, nullptr, false);
    if (doc.is_discarded()) return fail(Status::invalid(o.input + ": not JSON"));
  } else {
    auto measured = measure_profile(o);
    if (!measured.ok()) return fail(measured.status());
    doc = std::move(measured).value();
    source = "measured now: mosaic bench " + o.input + " --mode training --backends " + o.backend + " --batch " +
             std::to_string(o.batch) + " --threads " + std::to_string(o.threads) +
             (o.profile_concurrency > 1 ? ", the slowest of " + std::to_string(o.profile_concurrency) + " at once" : "");
  }
  auto prof = profile_from_bench(doc, o.input, o.backend, o.bucket_mb);
  if (!prof.ok()) return fail(prof.status());
  StepProfile p = std::move(prof).value();
  {
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const double cores = o.cores_per_node > 0 ? o.cores_per_node : static_cast<double>(std::max(online, 1L));
    p.measured_oversubscription = std::max(1.0, o.profile_concurrency * o.threads / cores);
  }
  const int64_t profiled_batch = p.batch;
  if (o.predict_batch > 0 && o.predict_batch != p.batch) {
    const double f = static_cast<double>(o.predict_batch) / static_cast<double>(p.batch);
    p.scale_compute(f, /*optimizer=*/false);  // the optimizer step does not depend on the batch
    p.batch = o.predict_batch;
  }
  const double measured_ips = static_cast<double>(p.batch) / p.compute_s();
  double scale = o.compute_scale;
  if (o.target_images_per_s > 0) scale = o.target_images_per_s / measured_ips;
  if (!(scale > 0)) return fail(Status::invalid("--compute-scale must be positive"));
  if (scale != 1) {
    p.scale_compute(1 / scale, /*optimizer=*/true);
  }

  std::printf("model %s  backend %s  batch %lld per rank%s  profile: %s\n", p.model.c_str(), p.backend.c_str(),
              static_cast<long long>(p.batch),
              profiled_batch != p.batch ? (" (profiled at " + std::to_string(profiled_batch) + ", compute scaled linearly)").c_str() : "",
              source.c_str());
  std::printf("one rank: forward+loss %.2f ms  backward %.2f ms  optimizer %.2f ms  = %.1f images/s%s\n",
              1e3 * (p.forward_s + p.loss_s), 1e3 * p.backward_s(), 1e3 * p.optimizer_s,
              static_cast<double>(p.batch) / p.compute_s(),
              scale != 1 ? (" (measured " + fmt("%.1f", measured_ips) + ", compute scaled x" + fmt("%.3g", scale) + ")").c_str() : "");
  std::printf("gradients %.2f MB in %zu bucket(s) of <= %.0f MB\n", static_cast<double>(p.gradient_bytes()) / 1e6,
              p.buckets.size(), o.bucket_mb);
  std::printf("network: %s (%s): latency %.2f us, %.2f GB/s%s, reduction %.2f GB/s\n", inter->name.c_str(),
              inter->source.c_str(), 1e6 * inter->latency_s, inter->bandwidth_bps / 1e9,
              inter->cpu_driven ? ", CPU-driven" : "", intra->reduce_bps / 1e9);
  if (intra->name != inter->name)
    std::printf("within a node: %s: latency %.2f us, %.2f GB/s%s\n", intra->name.c_str(), 1e6 * intra->latency_s,
                intra->bandwidth_bps / 1e9, intra->cpu_driven ? ", CPU-driven" : "");

  json out = {{"schema", "mosaic.simulate/1"},
              {"model", p.model},
              {"backend", p.backend},
              {"batch", p.batch},
              {"profiled_batch", profiled_batch},
              {"profile", source},
              {"compute_scale", scale},
              {"profile_concurrency", o.profile_concurrency},
              {"one_rank_images_per_s", static_cast<double>(p.batch) / p.compute_s()},
              {"gradient_bytes", p.gradient_bytes()},
              {"buckets", p.buckets.size()},
              {"collective", o.collective},
              {"network", {{"name", inter->name}, {"latency_s", inter->latency_s}, {"bandwidth_bps", inter->bandwidth_bps},
                           {"cpu_driven", inter->cpu_driven}, {"reduce_bps", intra->reduce_bps}, {"source", inter->source}}},
              {"intra", intra->name},
              {"cores_per_node", o.cores_per_node},
              {"threads_per_rank", o.threads},
              {"predictions", json::array()}};
  const double base = static_cast<double>(p.batch) / p.compute_s();  // one rank alone
  for (const auto& mode : o.modes) {
    std::printf("\n== %s ==\n%-8s %6s %7s %10s %10s %10s %10s %7s %11s %8s %6s  %-18s %s\n", mode.c_str(), "group", "ranks",
                "workers", "step ms", "compute", "comm", "exposed", "comm%", "images/s", "speedup", "eff.", "collective", "bound");
    for (size_t i = 0; i < layouts.size(); ++i) {
      dist::Topology topo;
      topo.nodes = layouts[i].first;
      topo.ranks_per_node = layouts[i].second;
      topo.cores_per_node = o.cores_per_node;
      topo.threads_per_rank = o.threads;
      topo.inter = inter.value();
      topo.intra = topo.nodes > 1 ? intra.value() : (o.intra.empty() ? inter.value() : intra.value());
      dist::SimOptions so;
      so.mode = mode;
      so.algorithm = collective.value();
      so.servers = o.servers;
      so.sync_every = o.sync_every;
      auto r = dist::simulate_step(p, topo, so);
      if (!r.ok()) {
        std::printf("%-8s %6d  %s\n", labels[i].c_str(), topo.ranks(), r.status().message().c_str());
        out["predictions"].push_back({{"mode", mode}, {"group", labels[i]}, {"ranks", topo.ranks()}, {"error", r.status().message()}});
        continue;
      }
      r->speedup = r->images_per_s / base;
      r->efficiency = r->speedup / r->workers;
      std::printf("%-8s %6d %7d %10.2f %10.2f %10.2f %10.2f %6.1f%% %11.1f %7.2fx %5.0f%%  %-18s %s\n", labels[i].c_str(),
                  r->ranks, r->workers, 1e3 * r->step_s, 1e3 * r->compute_s, 1e3 * r->comm_s, 1e3 * r->exposed_s,
                  100 * r->comm_share, r->images_per_s, r->speedup, 100 * r->efficiency, r->algorithm.c_str(), r->bound.c_str());
      out["predictions"].push_back({{"mode", mode},
                                    {"group", labels[i]},
                                    {"nodes", topo.nodes},
                                    {"ranks_per_node", topo.ranks_per_node},
                                    {"ranks", r->ranks},
                                    {"workers", r->workers},
                                    {"step_ms", 1e3 * r->step_s},
                                    {"compute_ms", 1e3 * r->compute_s},
                                    {"comm_ms", 1e3 * r->comm_s},
                                    {"exposed_ms", 1e3 * r->exposed_s},
                                    {"comm_share", r->comm_share},
                                    {"images_per_s", r->images_per_s},
                                    {"speedup", r->speedup},
                                    {"efficiency", r->efficiency},
                                    {"collective", r->algorithm},
                                    {"bound", r->bound}});
    }
  }
  if (!o.json.empty()) {
    if (Status st = write_file_atomic(o.json, out.dump(2) + "\n"); !st.is_ok()) return fail(st);
  }
  return 0;
}

}  // namespace mosaic::cli
