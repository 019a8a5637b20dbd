#include "api/auto_placement.hpp"
#include "ir/file_io.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "metrics/benchmark.hpp"
#include "metrics/peaks.hpp"

namespace mosaic::api {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// What one candidate backend measured, alone on the whole graph.
struct Measured {
  std::string backend;
  std::vector<double> node_ns;           ///< per graph node; kInf where it declined (fell back)
  std::map<std::string, bool> own_layout;  ///< values it keeps in its own (non-plain) layout
  double iteration_ms = 0;
  /// A backend computing on a device: the device, and the ns per byte its copies in and out
  /// took in this run (0: none measured).
  const Device* device = nullptr;
  double copy_ns_per_byte = 0;
};

Expected<Measured> measure(const Graph& g, const std::string& backend, const KernelRegistry& registry,
                           const AutoTiming& timing, const std::vector<std::string>& fallback,
                           const std::map<std::string, size_t>& index, double max_seconds) {
  Measured m;
  m.backend = backend;
  m.node_ns.assign(g.nodes.size(), kInf);
  MOSAIC_ASSIGN_OR_RETURN(auto plan, Plan::build(g, Placement::all_on(backend, fallback), registry, timing.plan_options));
  BenchConfig cfg;
  cfg.warmup = 3;
  cfg.iterations = 15;
  cfg.max_seconds = max_seconds;
  cfg.progress = "auto placement: measuring " + backend;
  MOSAIC_ASSIGN_OR_RETURN(const BenchResult r, timing.run(*plan, cfg));
  for (const auto& s : plan->steps())  // views run nowhere: free where the backend took them
    if (!s.conversion && s.backend == backend && index.count(plan->node(s).name)) m.node_ns[index.at(plan->node(s).name)] = 0;
  for (const auto& ns : r.nodes) {
    const PlanStep& s = plan->steps()[static_cast<size_t>(ns.step)];
    if (s.conversion || s.backend != backend || !index.count(plan->node(s).name)) continue;
    // Training: the node's forward and backward (a node without backward has no samples).
    m.node_ns[index.at(plan->node(s).name)] = ns.forward.median + (ns.backward_ns.empty() ? 0.0 : ns.backward.median);
  }
  for (const auto& v : plan->values())
    if (v.desc.layout) m.own_layout[v.name] = true;
  m.iteration_ms = r.iteration.median / 1e6;
  if (const BackendInfo* info = registry.info(backend); info && info->device) {
    m.device = info->device.get();
    double ns = 0, bytes = 0;
    for (const auto& n : r.nodes) {
      const PlanStep& s = plan->steps()[static_cast<size_t>(n.step)];
      const std::string& op = plan->node(s).op_type;
      if (s.conversion && (op == kToDeviceOp || op == kToHostOp)) {
        ns += n.forward.median;
        bytes += static_cast<double>(s.out_bytes);
      }
    }
    if (bytes > 0) m.copy_ns_per_byte = ns / bytes;
  }
  return m;
}

}  // namespace

double PlacementProblem::total(const std::vector<size_t>& a) const {
  double t = 0;
  for (size_t i = 0; i < a.size(); ++i) t += node[i][a[i]];
  for (const auto& e : edges) t += e.cost[a[e.from]][a[e.to]];
  return t;
}

std::vector<size_t> solve_placement(const PlacementProblem& p) {
  const size_t n = p.node.size(), k = n ? p.node[0].size() : 0;
  std::vector<size_t> a(n, 0);
  if (n == 0 || k == 0) return a;
  // dp[i][b]: cheapest placement of nodes 0..i with node i on b, charging the edges that
  // join consecutive nodes; parent[i][b]: the previous node's backend there.
  std::vector<std::vector<const PlacementProblem::Edge*>> chain(n);
  for (const auto& e : p.edges)
    if (e.from + 1 == e.to) chain[e.to].push_back(&e);
  std::vector<std::vector<double>> dp(n, std::vector<double>(k, kInf));
  std::vector<std::vector<size_t>> parent(n, std::vector<size_t>(k, 0));
  for (size_t b = 0; b < k; ++b) dp[0][b] = p.node[0][b];
  for (size_t i = 1; i < n; ++i)
    for (size_t b = 0; b < k; ++b)
      for (size_t q = 0; q < k; ++q) {
        double t = dp[i - 1][q] + p.node[i][b];
        for (const auto* e : chain[i]) t += e->cost[q][b];
        if (t < dp[i][b]) {
          dp[i][b] = t;
          parent[i][b] = q;
        }
      }
  for (size_t b = 1; b < k; ++b)
    if (dp[n - 1][b] < dp[n - 1][a[n - 1]]) a[n - 1] = b;
  for (size_t i = n - 1; i > 0; --i) a[i - 1] = parent[i][a[i]];
  // Edges that skip nodes (branches, skip connections): move single nodes while the full
  // cost drops (a local optimum; on a chain the DP's answer is already optimal).
  double best = p.total(a);
  for (int sweep = 0; sweep < 50; ++sweep) {
    bool improved = false;
    for (size_t i = 0; i < n; ++i)
      for (size_t b = 0; b < k; ++b) {
        if (b == a[i]) continue;
        const size_t was = a[i];
        a[i] = b;
        const double t = p.total(a);
        if (t < best - 1e-9) {
          best = t;
          improved = true;
        } else {
          a[i] = was;
        }
      }
    if (!improved) break;
  }
  return a;
}

namespace {

std::string cache_file() { return cache_dir() + "/auto_placement.json"; }

nlohmann::json read_cache() {
  std::ifstream in(cache_file());
  if (!in) return nlohmann::json::object();
  auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() ? j : nlohmann::json::object();
}

void write_cache(const std::string& key, const AutoPlacement& a) {
  nlohmann::json all = read_cache();
  all[key] = {{"node_backend", a.node_backend},   {"candidates", a.candidates},
              {"predicted_ms", a.predicted_ms},   {"single_ms", a.single_ms},
              {"best_single", a.best_single},     {"differences", a.differences},
              {"rejected", a.rejected},           {"checked_mixed_ms", a.checked_mixed_ms},
              {"checked_single_ms", a.checked_single_ms}, {"checked_singles_ms", a.checked_singles_ms},
              {"sequential_best", a.sequential_best}};
  std::error_code ec;
  std::filesystem::create_directories(cache_dir(), ec);
  // A cache that cannot be written only costs a measurement next time.
  (void)write_file_atomic(cache_file(), all.dump(1) + "\n");
}

}  // namespace

Expected<Placement> placement_of(const std::map<std::string, std::string>& node_backend, const std::string& default_backend,
                                 const std::vector<std::string>& fallback, const KernelRegistry& registry) {
  Placement p = Placement::all_on(default_backend, fallback);
  for (const auto& [name, backend] : node_backend) {
    if (backend == default_backend) continue;
    MOSAIC_RETURN_IF_ERROR(p.add("@" + name.substr(0, name.find('+')), backend, registry));
  }
  return p;
}

/// The choice cached under `key` by an earlier run (without its placement), if any.
bool cached_placement(const std::string& key, AutoPlacement& a) {
  const nlohmann::json cache = read_cache();
  if (!cache.contains(key)) return false;
  const auto& c = cache.at(key);
  a.node_backend = c.value("node_backend", std::map<std::string, std::string>{});
  a.predicted_ms = c.value("predicted_ms", 0.0);
  a.single_ms = c.value("single_ms", std::map<std::string, double>{});
  a.best_single = c.value("best_single", std::string());
  a.differences = c.value("differences", std::vector<std::string>{});
  a.rejected = c.value("rejected", std::vector<std::string>{});
  a.checked_mixed_ms = c.value("checked_mixed_ms", 0.0);
  a.checked_single_ms = c.value("checked_single_ms", 0.0);
  a.checked_singles_ms = c.value("checked_singles_ms", std::map<std::string, double>{});
  a.sequential_best = c.value("sequential_best", std::string());
  a.cached = true;
  return true;
}

/// The placement problem: each node's time on each candidate, and per edge between nodes a
/// conversion where the backends differ and either keeps the value in its own layout (read and
/// written once), and a copy where a value crosses to or from a device. A node no candidate runs
/// (it falls back everywhere) costs the same wherever it is asked.
PlacementProblem placement_problem(const Graph& timed, std::vector<Measured>& m, double bandwidth_gbs, bool training) {
  const size_t n = timed.nodes.size(), k = m.size();
  for (size_t i = 0; i < n; ++i) {
    bool runs = false;
    for (const auto& x : m) runs = runs || x.node_ns[i] < kInf;
    if (!runs)
      for (auto& x : m) x.node_ns[i] = 0;
  }
  // The problem: node times, and per edge between nodes a conversion where the backends
  // differ and either keeps the value in its own layout (read and written once).
  PlacementProblem problem;
  problem.node.assign(n, std::vector<double>(k, 0));
  for (size_t i = 0; i < n; ++i)
    for (size_t b = 0; b < k; ++b) problem.node[i][b] = m[b].node_ns[i];
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < n; ++i)
    for (const auto& out : timed.nodes[i].outputs) producer[out] = i;
  const double bytes_per_ns = std::max(bandwidth_gbs, 1.0);
  // A value crossing to or from a device costs the copy the planner inserts, at the rate the
  // device's copies ran when its backend was measured alone (else the machine's bandwidth).
  auto copy_ns = [&](size_t b, double bytes) {
    if (!m[b].device) return 0.0;
    return bytes * (m[b].copy_ns_per_byte > 0 ? m[b].copy_ns_per_byte : 1.0 / bytes_per_ns);
  };
  const double passes = training ? 2.0 : 1.0;  // training: the gradient crosses back
  std::set<std::string> graph_inputs, graph_outputs;
  for (const auto& v : timed.inputs)
    if (!timed.initializers.count(v.name)) graph_inputs.insert(v.name);
  for (const auto& v : timed.outputs) graph_outputs.insert(v.name);
  for (size_t i = 0; i < n; ++i) {
    // A device node reading a graph input, or making a graph output, copies it in or out.
    for (const auto& in : timed.nodes[i].inputs)
      if (graph_inputs.count(in) && timed.value_descs.count(in))
        for (size_t b = 0; b < k; ++b) problem.node[i][b] += passes * copy_ns(b, static_cast<double>(timed.value_descs.at(in).bytes()));
    for (const auto& out : timed.nodes[i].outputs)
      if (graph_outputs.count(out) && timed.value_descs.count(out))
        for (size_t b = 0; b < k; ++b) problem.node[i][b] += passes * copy_ns(b, static_cast<double>(timed.value_descs.at(out).bytes()));
    for (const auto& in : timed.nodes[i].inputs) {
      if (!producer.count(in) || !timed.value_descs.count(in)) continue;
      PlacementProblem::Edge e{producer[in], i, std::vector<std::vector<double>>(k, std::vector<double>(k, 0))};
      const double bytes = static_cast<double>(timed.value_descs.at(in).bytes());
      // Read and written once; in training the value's gradient crosses back as well.
      const double reorder = 2.0 * passes * bytes / bytes_per_ns;
      for (size_t bu = 0; bu < k; ++bu)
        for (size_t bv = 0; bv < k; ++bv) {
          if (bu == bv) continue;
          if (m[bu].own_layout.count(in) || m[bv].own_layout.count(in)) e.cost[bu][bv] = reorder;
          if (m[bu].device != m[bv].device) e.cost[bu][bv] += passes * (copy_ns(bu, bytes) + copy_ns(bv, bytes));
        }
      problem.edges.push_back(std::move(e));
    }
  }
  return problem;
}

/// The check: the cost model's plan and every candidate alone, in alternating rounds (drift
/// hits all alike). The fastest candidate over the rounds is the best single backend: the
/// one-after-another measurement above can rank two close backends wrongly (it once put
/// torch ahead of onednn in AlexNet training, which the rounds then measured 17% faster).
/// The cost model's choice is kept only if it beats that backend; otherwise auto is that
/// backend alone.
Status check_choice(const Graph& timed, const KernelRegistry& registry, const AutoTiming& timing,
                    const std::vector<std::string>& fallback, double check_loop_s, AutoPlacement& a) {
  std::unique_ptr<Plan> mixed;
  if (!a.differences.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(mixed, Plan::build(timed, a.placement, registry, timing.plan_options));
  }
  std::vector<std::unique_ptr<Plan>> singles;
  for (const auto& b : a.candidates) {
    MOSAIC_ASSIGN_OR_RETURN(auto plan, Plan::build(timed, Placement::all_on(b, fallback), registry, timing.plan_options));
    singles.push_back(std::move(plan));
  }
  BenchConfig cfg;
  cfg.warmup = 2;
  cfg.iterations = 10;
  cfg.max_seconds = check_loop_s;
  if (timing.say)
    timing.say("auto placement: checking the choice against every candidate alone, 3 alternating rounds (at most " +
               std::to_string(static_cast<int>(3 * check_loop_s * (a.candidates.size() + 1) + 0.5)) + " s)...");
  std::vector<double> mixed_ms;
  std::vector<std::vector<double>> single_ms(singles.size());
  for (int round = 0; round < 3; ++round) {
    cfg.progress = "auto placement: checking the choice (round " + std::to_string(round + 1) + "/3)";
    if (mixed) {
      MOSAIC_ASSIGN_OR_RETURN(const BenchResult rm, timing.run(*mixed, cfg));
      mixed_ms.push_back(rm.iteration.median / 1e6);
    }
    for (size_t b = 0; b < singles.size(); ++b) {
      MOSAIC_ASSIGN_OR_RETURN(const BenchResult rs, timing.run(*singles[b], cfg));
      single_ms[b].push_back(rs.iteration.median / 1e6);
    }
  }
  size_t fastest = 0;
  for (size_t b = 0; b < singles.size(); ++b) {
    a.checked_singles_ms[a.candidates[b]] = median(single_ms[b]);
    if (median(single_ms[b]) < median(single_ms[fastest])) fastest = b;
  }
  if (a.candidates[fastest] != a.best_single) {
    a.sequential_best = a.best_single;
    a.best_single = a.candidates[fastest];
  }
  a.checked_single_ms = median(single_ms[fastest]);
  if (mixed) a.checked_mixed_ms = median(mixed_ms);
  if (!mixed || a.checked_mixed_ms >= a.checked_single_ms) {
    a.rejected = a.differences;
    a.differences.clear();
    for (auto& [name, backend] : a.node_backend) backend = a.best_single;
    a.placement = Placement::all_on(a.best_single, fallback);
  }
  return Status::ok();
}

Expected<AutoPlacement> choose_auto_placement(const Graph& timed, const KernelRegistry& registry,
                                              const AutoTiming& timing,
                                              const std::vector<std::string>& fallback, double bandwidth_gbs,
                                              const std::string& cache_key, bool remeasure) {
  AutoPlacement a;
  for (const auto& b : registry.available_backends())
    if (b != "naive") a.candidates.push_back(b);
  if (a.candidates.empty()) return Status::invalid("`assign` auto: no backend besides the naive oracle to choose from");
  if (!remeasure && cached_placement(cache_key, a)) {
    MOSAIC_ASSIGN_OR_RETURN(a.placement, placement_of(a.node_backend, a.best_single, fallback, registry));
    return a;
  }
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < timed.nodes.size(); ++i) index[timed.nodes[i].name] = i;
  std::vector<Measured> m;
  // The budget, stated before minutes of measuring: half for the candidates alone, half for the
  // check's 3 rounds over the mixed plan and every candidate.
  const double candidates = static_cast<double>(a.candidates.size());
  const double per_candidate_s = std::max(1.0, timing.budget_seconds / 2 / candidates);
  const double check_loop_s = std::max(0.5, timing.budget_seconds / 2 / (3 * (candidates + 1)));
  if (timing.say) {
    std::string list;
    for (const auto& b : a.candidates) list += (list.empty() ? "" : ", ") + b;
    timing.say("auto placement: measuring " + std::to_string(a.candidates.size()) + " candidates alone (" + list +
               "), then checking the choice; at most about " + std::to_string(static_cast<int>(timing.budget_seconds + 0.5)) +
               " s (--auto-budget)");
  }
  for (const auto& b : a.candidates) {
    if (timing.say)
      timing.say("auto placement: measuring " + b + " alone (at most " + std::to_string(static_cast<int>(per_candidate_s + 0.5)) +
                 " s)...");
    auto r = measure(timed, b, registry, timing, fallback, index, per_candidate_s);
    if (!r.ok()) return Status(r.status().code(), "`assign` auto: measuring " + b + ": " + r.status().message());
    a.single_ms[b] = r->iteration_ms;
    m.push_back(std::move(r).value());
  }
  a.best_single = a.candidates[0];
  for (const auto& b : a.candidates)
    if (a.single_ms[b] < a.single_ms[a.best_single]) a.best_single = b;
  // The fastest single backend first: the search keeps a node there unless another is
  // strictly cheaper (views cost nothing anywhere).
  for (size_t i = 1; i < m.size(); ++i)
    if (m[i].backend == a.best_single) {
      std::swap(m[0], m[i]);
      std::swap(a.candidates[0], a.candidates[i]);
    }
  const size_t n = timed.nodes.size();
  const PlacementProblem problem = placement_problem(timed, m, bandwidth_gbs, timing.plan_options.training);
  const std::vector<size_t> choice = solve_placement(problem);
  a.predicted_ms = problem.total(choice) / 1e6;
  const size_t best = static_cast<size_t>(std::find(a.candidates.begin(), a.candidates.end(), a.best_single) -
                                          a.candidates.begin());
  for (size_t i = 0; i < n; ++i) {
    const std::string& name = timed.nodes[i].name;
    a.node_backend[name] = a.candidates[choice[i]];
    if (choice[i] != best && problem.node[i][best] > 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf, " (%.3f ms vs %.3f ms on %s)", problem.node[i][choice[i]] / 1e6, problem.node[i][best] / 1e6,
                    a.best_single.c_str());
      a.differences.push_back(name + " on " + a.candidates[choice[i]] + buf);
    }
  }
  MOSAIC_ASSIGN_OR_RETURN(a.placement, placement_of(a.node_backend, a.best_single, fallback, registry));
  MOSAIC_RETURN_IF_ERROR(check_choice(timed, registry, timing, fallback, check_loop_s, a));
  write_cache(cache_key, a);
  return a;
}

}  // namespace mosaic::api
