// api::simulate (api/simulate.hpp): the profile, the networks, and the predictions per mode
// and rank group, as the mosaic.simulate/1 document.
#include "api/simulate.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "api/option_rules.hpp"
#include "api/util.hpp"
#include "distributed/buckets.hpp"
#include "distributed/cost_model.hpp"
#include "distributed/data_parallel.hpp"

namespace mosaic::api {
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
  if (!run) return Status::invalid(file + ": no run labelled '" + backend + "' (name it as the backend)");
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
Expected<json> measure_profile(const SimulateQuery& o) {
  const std::string base = std::filesystem::temp_directory_path().string() + "/mosaic-simulate-" + std::to_string(getpid());
  const int k = std::max(o.profile_concurrency, 1);
  MOSAIC_ASSIGN_OR_RETURN(const std::string program, mosaic_executable());
  if (o.progress)
    *o.progress << "profiling " << o.input << " on " << o.backend << " (training, batch " << o.batch << ", " << o.threads
                << " thread(s), " << o.iterations << " steps" << (k > 1 ? ", " + std::to_string(k) + " at once" : "")
                << ")..." << std::endl;
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
      codes[static_cast<size_t>(i)] = run_program(program, args, base + "-" + std::to_string(i) + ".log");
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
  if (!std::regex_match(g, m, re)) return Status::invalid("`groups`: '" + g + "' is not NnMc (e.g. 2n8c: 2 nodes, 8 ranks)");
  const int nodes = std::stoi(m[1]), ranks = std::stoi(m[2]);
  if (nodes < 1 || ranks < nodes || ranks % nodes != 0)
    return Status::invalid("`groups`: '" + g + "' needs a whole number of ranks per node");
  return std::make_pair(nodes, ranks / nodes);
}


json network_json(const dist::NetworkProfile& n) {
  return {{"name", n.name},          {"latency_s", n.latency_s},   {"bandwidth_bps", n.bandwidth_bps},
          {"cpu_driven", n.cpu_driven}, {"reduce_bps", n.reduce_bps}, {"source", n.source}};
}

}  // namespace

namespace {

/// The (nodes, ranks per node) layouts to predict and their labels: `groups` as given, or each
/// of `ranks` packed `ranks_per_node` to a node.
Status rank_layouts(const SimulateQuery& o, std::vector<std::pair<int, int>>& layouts, std::vector<std::string>& labels) {
  if (!o.groups.empty()) {
    for (const auto& g : o.groups) {
      MOSAIC_ASSIGN_OR_RETURN(auto p, parse_group(g));
      layouts.push_back(p);
      labels.push_back(g);
    }
    return Status::ok();
  }
  if (o.ranks.empty()) return Status::invalid("`ranks` is empty");
  for (int n : o.ranks) {
    if (n < 1) return Status::invalid("`ranks`: " + std::to_string(n) + " is not a positive rank count");
    const int per = std::min(n, o.ranks_per_node);
    if (n % per != 0)
      return Status::invalid("`ranks`: " + std::to_string(n) + " is not a multiple of `ranks_per_node` (" + std::to_string(per) + ")");
    layouts.emplace_back(n / per, per);
    labels.push_back(std::to_string(n / per) + "n" + std::to_string(n) + "c");
  }
  return Status::ok();
}

/// The profile: a document as given, a benchmark JSON file, or measured now; and where it came from.
Status profile_document(const SimulateQuery& o, json& doc, std::string& source) {
  doc = o.profile;
  source = o.input.empty() ? "a profile document" : o.input;
  if (doc.is_null() && o.input.size() > 5 && o.input.substr(o.input.size() - 5) == ".json") {
    std::ifstream f(o.input);
    if (!f) return Status::not_found(o.input + ": cannot open");
    doc = json::parse(f, nullptr, false);
    if (doc.is_discarded()) return Status::invalid(o.input + ": not JSON");
  } else if (doc.is_null()) {
    MOSAIC_ASSIGN_OR_RETURN(doc, measure_profile(o));
    source = "measured now: mosaic bench " + o.input + " --mode training --backends " + o.backend + " --batch " +
             std::to_string(o.batch) + " --threads " + std::to_string(o.threads) +
             (o.profile_concurrency > 1 ? ", the slowest of " + std::to_string(o.profile_concurrency) + " at once" : "");
  }
  return Status::ok();
}

}  // namespace

Expected<json> simulate(const SimulateQuery& o) {
  if (o.input.empty() && o.profile.is_null())
    return Status::invalid("simulate needs a model, a training benchmark JSON file or a profile document");
  for (const auto& m : o.modes) {
    bool known = false;
    std::vector<std::string> names;
    for (const auto& [name, what] : dist::distributed_modes()) names.push_back(name), known = known || name == m;
    if (!known) return Status::invalid("`modes`: unknown mode '" + m + "' (" + join(names) + ")");
  }
  auto collective = dist::parse_collective(o.collective);
  if (!collective.ok()) return collective.status().with_context("`collective`");
  auto inter = dist::load_network(o.network);
  if (!inter.ok()) return inter.status().with_context("`network`");
  auto intra = dist::load_network(o.intra.empty() ? o.network : o.intra);
  if (!intra.ok()) return intra.status().with_context("`intra`");
  MOSAIC_RETURN_IF_ERROR(check_numbers(
      "simulate", {{"batch", o.batch}, {"threads", o.threads}, {"iterations", o.iterations}, {"warmup", o.warmup},
                   {"profile_concurrency", o.profile_concurrency}, {"ranks_per_node", o.ranks_per_node},
                   {"cores_per_node", o.cores_per_node}, {"servers", o.servers}, {"sync_every", o.sync_every},
                   {"bucket_mb", o.bucket_mb}, {"compute_scale", o.compute_scale}}));
  // 0: not asked for (the defaults)
  if (o.target_images_per_s != 0)
    MOSAIC_RETURN_IF_ERROR(check_numbers("simulate", {{"target_images_per_s", o.target_images_per_s}}));
  if (o.predict_batch != 0) MOSAIC_RETURN_IF_ERROR(check_numbers("simulate", {{"predict_batch", o.predict_batch}}));
  std::vector<std::pair<int, int>> layouts;  // (nodes, ranks per node)
  std::vector<std::string> labels;
  MOSAIC_RETURN_IF_ERROR(rank_layouts(o, layouts, labels));
  json doc;
  std::string source;
  MOSAIC_RETURN_IF_ERROR(profile_document(o, doc, source));
  MOSAIC_ASSIGN_OR_RETURN(StepProfile p, profile_from_bench(doc, o.input.empty() ? "the profile document" : o.input,
                                                            o.backend, o.bucket_mb));
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
  if (scale != 1) p.scale_compute(1 / scale, /*optimizer=*/true);

  json out = {{"schema", "mosaic.simulate/1"},
              {"model", p.model},
              {"backend", p.backend},
              {"batch", p.batch},
              {"profiled_batch", profiled_batch},
              {"profile", source},
              {"compute_scale", scale},
              {"profile_concurrency", o.profile_concurrency},
              {"one_rank_images_per_s", static_cast<double>(p.batch) / p.compute_s()},
              {"measured_images_per_s", measured_ips},
              {"one_rank",
               {{"forward_loss_ms", 1e3 * (p.forward_s + p.loss_s)},
                {"backward_ms", 1e3 * p.backward_s()},
                {"optimizer_ms", 1e3 * p.optimizer_s}}},
              {"gradient_bytes", p.gradient_bytes()},
              {"buckets", p.buckets.size()},
              {"bucket_mb", o.bucket_mb},
              {"collective", o.collective},
              {"network", network_json(inter.value())},
              {"intra", intra->name},
              {"intra_network", network_json(intra.value())},
              {"cores_per_node", o.cores_per_node},
              {"threads_per_rank", o.threads},
              {"predictions", json::array()}};
  const double base = static_cast<double>(p.batch) / p.compute_s();  // one rank alone
  for (const auto& mode : o.modes) {
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
        out["predictions"].push_back({{"mode", mode}, {"group", labels[i]}, {"ranks", topo.ranks()}, {"error", r.status().message()}});
        continue;
      }
      r->speedup = r->images_per_s / base;
      r->efficiency = r->speedup / r->workers;
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
  return out;
}

}  // namespace mosaic::api
