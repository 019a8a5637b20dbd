#include "frontends/cli/commands.hpp"

#include <omp.h>
#include <regex.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "backends/registry.hpp"
#include "distributed/data_parallel.hpp"
#include "frontends/cli/bench_auto.hpp"
#include "frontends/cli/cli_util.hpp"
#include "frontends/cli/models.hpp"
#include "core/fuse.hpp"
#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "core/prepare.hpp"
#include "examples/zoo.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "metrics/compare.hpp"
#include "backends/machine_probe.hpp"
#include "metrics/junit.hpp"
#include "metrics/progress.hpp"
#include "metrics/report.hpp"
#include "validate/determinism.hpp"
#include "validate/per_node.hpp"
#include "operators/schema.hpp"

namespace mosaic::cli {
namespace {

namespace fs = std::filesystem;


std::string with_commas(int64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

}  // namespace

// ---- info ---------------------------------------------------------------------------------

int run_info(const InfoOptions& o) {
  set_num_threads(o.common.threads);
  PrepareReport pr;
  auto g = load_prepared(o.model, o.common, &pr);
  if (!g.ok()) return fail(g.status());
  PlanOptions sizes_only;
  sizes_only.allocate = false;  // sizes are computed, not allocated: any --batch works
  auto plan = Plan::build(g.value(), Placement::all_on("naive", {}), builtin_registry(), sizes_only);
  if (!plan.ok()) return fail(plan.status());
  const Plan& p = *plan.value();
  std::cout << "model:   " << o.model << " (graph '" << g->name << "', opset " << g->opset << ")\n";
  for (const auto& in : g->inputs) std::cout << "input:   " << in.name << " " << g->value_descs.at(in.name).str() << "\n";
  for (const auto& out : g->outputs)
    std::cout << "output:  " << out.name << " " << g->value_descs.at(out.name).str() << "\n";
  for (const auto& n : pr.notes) std::cout << "note:    " << n << "\n";
  std::map<std::string, int> ops;
  double flops = 0;
  for (const auto& s : p.steps()) {
    ops[p.node(s).op_type]++;
    flops += s.flops;
  }
  std::cout << "params:  " << with_commas(g->parameter_count()) << " (" << format_bytes(static_cast<double>(p.weight_bytes()))
            << ")\n";
  std::cout << "nodes:   " << p.steps().size() << " (" << pr.folded_nodes << " constant nodes folded at load):";
  for (const auto& [op, n] : ops) std::cout << " " << op << " " << n;
  const int64_t batch = g->inputs.empty() ? 1 : g->value_descs.at(g->inputs[0].name).shape.at(0);
  std::cout << "\nFLOPs:   " << flops / 1e9 << " GFLOP forward per batch of " << batch << " (" << flops / 2e6 / batch
            << " M multiply-adds per image)\n";
  std::cout << "memory:  weights " << format_bytes(static_cast<double>(p.weight_bytes())) << ", activations "
            << format_bytes(static_cast<double>(p.activation_bytes())) << " (planned with buffer reuse)\n";
  if (!o.nodes) return 0;
  // Trainable parameters by name (what --freeze matches), with their shapes.
  std::cout << "\nparameters (names for train --freeze):\n";
  for (const auto& [name, t] : g->initializers)
    if (t.dtype() == DType::kF32 && t.numel() > 0)
      std::cout << "  " << name << " " << shape_str(t.shape()) << " (" << with_commas(t.numel()) << ")\n";
  const auto& reg = builtin_registry();
  char line[1024];
  int width = 20;
  for (const auto& s : p.steps()) width = std::max(width, static_cast<int>(p.node(s).name.size()));
  std::snprintf(line, sizeof line, "\n%-*s %-18s %-20s %12s %10s  %s\n", width, "node", "op", "output", "params", "MFLOP",
                "backends");
  std::cout << line;
  for (const auto& s : p.steps()) {
    const Node& n = p.node(s);
    int64_t params = 0;
    for (size_t i = 0; i < s.in.size(); ++i)
      if (s.in[i] >= 0 && p.values()[s.in[i]].is_const && p.values()[s.in[i]].desc.dtype == DType::kF32)
        params += p.values()[s.in[i]].desc.numel();
    // Which backends take this node: their capability queries, nothing built.
    KernelContext ctx;
    ctx.node = &n;
    ctx.opset = g->opset;
    for (int v : s.in) {
      ctx.inputs.push_back(v < 0 ? TensorDesc{} : p.values()[v].desc);
      ctx.input_present.push_back(v >= 0);
      ctx.constants.push_back(v >= 0 && p.values()[v].is_const ? &p.values()[v].tensor : nullptr);
    }
    for (int v : s.out) {
      ctx.outputs.push_back(v < 0 ? TensorDesc{} : p.values()[v].desc);
      ctx.output_present.push_back(v >= 0);
    }
    std::string backends;
    for (const auto& b : reg.backends()) backends += (backends.empty() ? "" : ",") + (reg.query(b, ctx).accepted() ? b : "-");
    std::snprintf(line, sizeof line, "%-*.*s %-18.18s %-20.20s %12s %10.2f  %s\n", width, 600, n.name.c_str(), n.op_type.c_str(),
                  shape_str(p.values()[s.out[0]].desc.shape).c_str(), with_commas(params).c_str(), s.flops / 1e6,
                  backends.c_str());
    std::cout << line;
  }
  return 0;
}

// ---- bench --------

namespace {

/// Adds a timed configuration to the report, with its check's outcome and peak memory.
void add_config(BenchReport& report, const std::string& label, Plan& plan, const BenchResult& result,
                const ConfigReport& check) {
  ConfigReport c = make_config_report(label, plan, result, report.batch);
  c.checked = check.checked;
  c.check_ok = check.check_ok;
  c.max_abs_err = check.max_abs_err;
  c.max_rel_err = check.max_rel_err;
  c.check_message = check.check_message;
  c.first_divergent_node = check.first_divergent_node;
  c.peak_tracked_bytes = plan.tracker().peak();
  report.configs.push_back(std::move(c));
}

/// Prints the report, writes the requested files, and turns the checks into an exit code.
int emit_report(BenchReport& report, const BenchOptions& o, bool all_ok, const char* what, const TraceRecorder* trace,
                ResultsDb* db) {
  fill_speedups(report, 0);
  for (auto& n : peak_sanity_notes(report)) report.notes.push_back(std::move(n));
  report.peak_rss_bytes = peak_rss_bytes();
  print_report(report, std::cout);
  if (!o.json.empty()) {
    Status st = write_json(report, o.json);
    if (!st.is_ok()) return fail(st);
  }
  if (!o.csv.empty()) {
    Status st = write_csv(report, o.csv);
    if (!st.is_ok()) return fail(st);
  }
  if (trace) {
    Status st = trace->write(o.trace);
    if (!st.is_ok()) return fail(st);
    std::cerr << "trace: " << trace->events() << " events in " << o.trace << " (open in https://ui.perfetto.dev)\n";
  }
  if (Status st = record_run(db, bench_json(report)); !st.is_ok()) return fail(st);
  if (!all_ok) std::cerr << "mosaic: " << what << " differ from the naive reference (see check lines above)\n";
  return all_ok ? 0 : 1;
}

/// The first node that diverges from naive when run alone (a failed check's culprit), or
/// why none could be named.
std::string first_divergent(const Graph& g, const KernelRegistry& reg, const Placement& placement,
                            const std::vector<Tensor>& inputs, const BenchOptions& o, const Tensor* labels = nullptr) {
  auto r = labels ? compare_per_node_backward(g, reg, placement, inputs, *labels, o.rtol, o.atol)
                  : compare_per_node(g, reg, placement, inputs, o.rtol, o.atol);
  if (!r.ok()) return "per-node check failed: " + r.status().message();
  if (r->first_divergent < 0) return "none alone: every node agrees with naive on its own inputs (the error accumulates)";
  const NodeAgreement& n = r->nodes[r->first_divergent];
  char buf[160];
  std::snprintf(buf, sizeof buf, ": max abs %.3g, max rel %.3g, rel L2 %.3g", n.max_abs, n.max_rel, n.rel_l2);
  return "'" + n.node + "' (" + n.op + ") on " + n.backend + (labels ? " (backward)" : "") + buf + "; " + n.note;
}

/// Applies the fusion pass to the graph the timed plans run, noting what it merged.
void fuse_for_bench(Graph& timed, const FuseOptions& fo, BenchReport& report) {
  FuseReport fr = fuse_graph(timed, fo);
  if (fr.fused.empty()) return;
  std::string list;
  for (const auto& f : fr.fused) list += (list.empty() ? "" : ", ") + f;
  report.notes.push_back("fused " + std::to_string(fr.fused.size()) + " node pairs (--no-fuse to disable): " + list);
}

/// Training benchmark: each iteration is forward, loss, backward and an optimizer step.
/// Before timing, every plan's loss and parameter gradients on the same batch are compared
/// with the naive plan's.
int run_training_bench(const BenchOptions& o, BenchConfigs configs, const std::vector<std::string>& fallback,
                       Graph& g, const std::vector<Tensor>& inputs, Tensor labels, BenchReport& report,
                       TraceRecorder* trace, ResultsDb* db, dist::DataParallel* dp) {
  const auto& reg = builtin_registry();
  const Shape out = g.value_descs.at(g.outputs[0].name).shape;
  if (out.size() != 2) return fail(Status::invalid(g.source + ": training needs a first output of shape [N, C]"));
  if (!labels.defined()) {
    labels = Tensor::empty({DType::kI64, {out[0]}});
    std::mt19937_64 rng(o.common.seed + 1);
    for (int64_t i = 0; i < out[0]; ++i) labels.i64()[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(out[1]));
  } else {
    report.notes.push_back("labels: the same images' labels");
  }
  PlanOptions po;
  po.training = true;
  po.seed = o.common.seed;
  po.deterministic = o.deterministic;
  // Timed plans fold zero padding into convolutions (activations stay separate: fused
  // ones have no backward); the naive reference trains the graph as loaded.
  Graph timed = g;
  if (o.fuse) {
    FuseOptions fo;
    fo.activations = false;
    fuse_for_bench(timed, fo, report);
  }
  OptimizerConfig oc;
  oc.lr = o.lr;
  const AutoTiming timing{po, [&](Plan& plan, const BenchConfig& cfg) -> Expected<BenchResult> {
                            MOSAIC_ASSIGN_OR_RETURN(auto opt, make_optimizer(o.optimizer, oc));
                            return run_training_benchmark(plan, inputs, labels, *opt, cfg);
                          }};
  const bool auto_assign = o.assign == "auto";
  if (auto_assign)  // per node, the candidate backend that makes the whole training step fastest
    if (Status st = add_auto_configs(o, timed, timing, fallback, report, configs); !st.is_ok()) return fail(st);
  std::vector<std::unique_ptr<Plan>> plans;
  dist::DetachOnExit detach{dp};  // before the plan(s) go
  for (const auto& [label, placement] : configs) {
    auto plan = Plan::build(timed, placement, reg, po);
    if (!plan.ok()) return fail(explain_unsupported(plan.status(), g));
    plans.push_back(std::move(plan.value()));
  }
  // One forward/backward on `plan`: its loss and its parameters' gradients (copied).
  auto gradients = [&](Plan& plan, double* loss, std::vector<Tensor>* grads) -> Status {
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr));
    Tensor d = Tensor::empty({DType::kF32, plan.output(0).shape()});
    MOSAIC_ASSIGN_OR_RETURN(LossValue l, softmax_cross_entropy(plan.output(0), labels, &d));
    *loss = l.loss;
    std::vector<Tensor> seeds{d};
    for (size_t i = 1; i < g.outputs.size(); ++i) seeds.push_back(Tensor::empty({DType::kF32, plan.output(i).shape()}));
    MOSAIC_RETURN_IF_ERROR(plan.backward(seeds));
    for (const auto& p : plan.parameters()) grads->push_back(p.grad.clone());
    return Status::ok();
  };
  double ref_loss = 0;
  std::vector<Tensor> ref_grads;
  if (o.check) {
    auto ref = Plan::build(g, Placement::all_on("naive", {}), reg, po);
    if (!ref.ok()) return fail(ref.status());
    std::cerr << "computing the naive reference gradients...\n";
    Status st = gradients(*ref.value(), &ref_loss, &ref_grads);
    if (!st.is_ok()) return fail(st);
  }
  // The plans own copies of the float initializers; the loaded ones would only add to the
  // peak memory the benchmark reports.
  g.release_float_initializers();
  timed.release_float_initializers();
  // Checks first, so the reference gradients are released before anything is timed.
  bool all_ok = true;
  std::vector<ConfigReport> checks(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    Plan& plan = *plans[i];
    ConfigReport& check = checks[i];
    if (o.check) {
      double loss = 0;
      std::vector<Tensor> grads;
      Status st = gradients(plan, &loss, &grads);
      if (!st.is_ok()) return fail(st);
      check.checked = true;
      check.max_abs_err = std::fabs(loss - ref_loss);
      if (check.max_abs_err > o.rtol * std::fabs(ref_loss) + 1e-6) {
        check.check_ok = false;
        check.check_message = "loss " + std::to_string(loss) + " vs " + std::to_string(ref_loss);
      }
      const auto params = plan.parameters();
      for (size_t k = 0; k < grads.size(); ++k) {
        // Gradients compare on the scale of the largest gradient of the tensor. A weight
        // gradient sums batch x positions products in float (65,536 for AlexNet-CIFAR's conv1 at
        // batch 64) and its small elements are cancellations of them, so the tolerance is 1% of
        // that scale: ample to catch a wrong or missing term, which errs by the scale itself.
        // Tight agreement is gradcheck's job.
        double scale = 0;
        for (int64_t e = 0; e < ref_grads[k].numel(); ++e) scale = std::max(scale, std::fabs(ref_grads[k].get(e)));
        Agreement a = compare_tensors(grads[k], ref_grads[k], o.rtol, 1e-2 * scale + 1e-9);
        check.max_rel_err = std::max(check.max_rel_err, a.max_abs / std::max(scale, 1e-12));
        if (!a.ok && check.check_ok) {
          check.check_ok = false;
          check.check_message = "gradient of '" + params[k].name + "' " + a.message;
        }
      }
      if (!check.check_ok) check.first_divergent_node = first_divergent(timed, reg, configs[i].second, inputs, o, &labels);
      all_ok = all_ok && check.check_ok;
    }
  }
  ref_grads.clear();
  ref_grads.shrink_to_fit();
  for (size_t i = 0; i < configs.size(); ++i) {
    Plan& plan = *plans[i];
    std::cerr << "benchmarking " << configs[i].first << " (training)...\n";
    BenchConfig cfg = o.config;
    cfg.progress = "benchmarking " + configs[i].first;
    auto opt = make_optimizer(o.optimizer, oc);
    if (!opt.ok()) return fail(opt.status());
    plan.tracker().reset_peak();
    if (trace) trace->begin_config(configs[i].first, plan);
    if (dp) {  // every rank starts from rank 0's parameters; fixed iteration counts (no budget)
      if (Status st = dp->attach(plan); !st.is_ok()) return fail(st);
      cfg.max_seconds = 1e7;
    }
    auto r = run_training_benchmark(plan, inputs, labels, *opt.value(), cfg, trace, dp ? dp->gradient_exchange() : nullptr);
    if (!r.ok()) return fail(r.status());
    add_config(report, configs[i].first, plan, r.value(), checks[i]);
    if (dp) {
      double seconds = 0;
      for (double ns : r->iteration_ns) seconds += ns / 1e9;
      nlohmann::json d = dp->report(seconds, static_cast<int64_t>(r->iteration_ns.size()) * report.batch);
      const double median_s = r->iteration.median / 1e9;
      d["global_batch"] = report.batch * dp->size();
      d["global_images_per_s"] = median_s > 0 ? static_cast<double>(report.batch * dp->size()) / median_s : 0.0;
      d["parameters_identical"] = dp->parameters_identical(plan.parameters());
      if (dp->world_rank() == 0)
        std::printf("%s: data-parallel %s, %d ranks x batch %lld: %.1f images/s global (median step %.2f ms), parameters "
                  "identical on every rank: %s\n",
                  configs[i].first.c_str(), dp->mode().c_str(), dp->size(), static_cast<long long>(report.batch),
                  d["global_images_per_s"].get<double>(), 1e3 * median_s, d["parameters_identical"].get<bool>() ? "yes" : "NO");
      report.distributed[configs[i].first] = d;
    }
  }
  if (dp && dp->world_rank() != 0) return all_ok ? 0 : 1;  // rank 0 reports
  if (auto_assign)  // the auto plan against the fastest single backend, in alternating rounds
    if (Status st = auto_side_by_side(o, configs, plans, timing, report); !st.is_ok()) return fail(st);
  return emit_report(report, o, all_ok, "loss and gradients", trace, db);
}

}  // namespace------------------------------------------------------------------------

int run_bench(const BenchOptions& o) {
  dist::MpiSession mpi_session;
  if (o.mode != "inference" && o.mode != "training")
    return fail(Status::invalid("--mode must be inference or training, got '" + o.mode + "'"));
  if (!o.distributed.empty()) {
    if (o.distributed != "allreduce" && o.distributed != "allreduce-blocking")
      return fail(Status::invalid("bench --distributed takes allreduce or allreduce-blocking, got '" + o.distributed +
                                  "' (train runs the other modes)"));
    if (o.mode != "training") return fail(Status::invalid("bench --distributed needs --mode training"));
    if (o.config.target_ci > 0 || o.config.min_seconds > 0 || o.find_max_batch || o.processes > 1)
      return fail(Status::invalid("bench --distributed runs fixed iteration counts on every rank: it excludes "
                                  "--target-ci, -t, --find-max-batch and --processes"));
  }
  const bool training = o.mode == "training";
  // Everything that can be refused is refused before minutes of timing.
  if (Status st = check_output_paths({{"--json", o.json}, {"--csv", o.csv}, {"--trace", o.trace}}); !st.is_ok())
    return fail(st);
  auto db = open_run_store(o.find_max_batch ? DbOptions{"", true} : o.db);  // --find-max-batch times nothing
  if (!db.ok()) return fail(db.status());
  if (training) {
    OptimizerConfig probe;
    probe.lr = o.lr;
    if (auto opt = make_optimizer(o.optimizer, probe); !opt.ok()) return fail(opt.status().with_context("--optimizer"));
  }
  const auto& reg = builtin_registry();
  for (const auto& b : o.backends)
    if (!reg.has_backend(b)) return fail(Status::invalid("unknown backend '" + b + "' (known: " + join(reg.backends()) + ")"));
  for (const auto& b : o.fallback)
    if (b != "none" && !reg.has_backend(b)) return fail(Status::invalid("unknown fallback backend '" + b + "'"));
  std::vector<std::string> fallback;
  for (const auto& b : o.fallback)
    if (b != "none") fallback.push_back(b);
  BenchConfigs configs;
  const bool auto_assign = o.assign == "auto";
  if (Status st = check_auto_options(o); !st.is_ok()) return fail(st);
  if (auto_assign) {
    // Chosen below, once the graph is loaded and fused.
  } else if (!o.assign.empty()) {
    auto p = assign_placement(o.assign, fallback);
    if (!p.ok()) return fail(p.status());
    configs.emplace_back("mixed", p.value());
  } else {
    for (const auto& b : o.backends) configs.emplace_back(b, Placement::all_on(b, fallback));
  }
  set_num_threads(o.common.threads);
  PrepareReport pr;
  auto g = load_prepared(o.model, o.common, &pr);
  if (!g.ok()) return fail(g.status());
  for (const auto& [label, placement] : configs)
    if (Status st = placement.check_names(g.value()); !st.is_ok()) return fail(st);
  if (o.find_max_batch) return run_find_max_batch(o, configs);
  std::vector<Tensor> inputs;
  Tensor data_labels;
  std::string input_description = "random uniform [0, 1) (seed " + std::to_string(o.common.seed) + ")";
  if (o.data.empty()) {
    inputs = random_inputs(g.value(), o.common.seed);
  } else {
    auto batch = real_batch(g.value(), o.data, o.common.seed);
    if (!batch.ok()) return fail(batch.status());
    inputs = std::move(batch->inputs);
    data_labels = batch->labels;
    input_description = batch->description;
    if (training && !data_labels.defined())
      pr.notes.push_back("labels: random (the data's classes do not match the model's logits)");
  }

  BenchReport report;
  report.model = o.model;
  report.input = input_description;
  report.batch = g->inputs.empty() ? 1 : g->value_descs.at(g->inputs[0].name).shape.at(0);
  report.mode = o.mode;
  report.threads = omp_get_max_threads();
  report.blas_core = blas_core_name();
  report.onednn_isa = onednn_isa_name();
  report.config = o.config;
  report.seed = o.common.seed;
  report.notes = pr.notes;
  report.provenance = run_provenance(o.model, {{"input", std::to_string(o.common.seed)}});
  if (o.peaks) {
    const Provenance& p = report.provenance;
    const std::string key = p.cpu_model + " | " + std::to_string(p.threads) + " threads | OpenBLAS " + p.blas_core +
                            " | oneDNN " + p.onednn_isa;
    report.peaks = load_or_measure_peaks(
        key,
        [] {
          std::cerr << "measuring the machine's sgemm and memory peaks (once; cached in " << cache_dir() << ")...\n";
          MachinePeaks m;
          m.others_cpu = others_cpu_share_during([&m] {
            m.openblas_sgemm_gflops = probe_sgemm_gflops();
            m.onednn_sgemm_gflops = probe_onednn_sgemm_gflops();
            m.bandwidth_gbs = probe_triad_gbs();
          });
          m.sgemm_gflops = std::max(m.openblas_sgemm_gflops, m.onednn_sgemm_gflops);
          return m;
        },
        o.refresh_peaks);
  }

  TraceRecorder recorder;
  TraceRecorder* trace = o.trace.empty() ? nullptr : &recorder;
  if (training) {
    std::unique_ptr<dist::DataParallel> group;
    if (!o.distributed.empty()) {
      dist::DataParallelOptions dpo;
      dpo.mode = o.distributed;
      dpo.bucket_mb = o.bucket_mb;
      std::string settings = o.model + "|" + std::to_string(o.common.batch) + "|" + o.optimizer + "|" +
                             std::to_string(o.lr) + "|" + std::to_string(o.config.iterations) + "|" +
                             std::to_string(o.config.warmup) + "|" + std::to_string(o.config.repeats) + "|" +
                             std::to_string(o.common.seed);
      for (const auto& c : configs) settings += "|" + c.first;
      auto started = dist::DataParallel::start(dpo, settings);
      if (!started.ok()) return fail(started.status());
      group = std::move(started).value();
      report.notes.push_back("data-parallel " + o.distributed + ": " + std::to_string(group->size()) +
                             " ranks x batch " + std::to_string(o.common.batch) + "; per-node figures are rank 0's");
    }
    const int code = run_training_bench(o, configs, fallback, g.value(), inputs, data_labels, report, trace,
                                        db.value().get(), group.get());
    // A rank that failed must not leave the others in a collective.
    if (code == 2 && group && group->size() > 1) group->abort("bench failed (its error is above)");
    return code;
  }
  // Timed plans run the optimised graph; the naive reference runs the graph as loaded.
  Graph timed = g.value();
  if (o.fuse) fuse_for_bench(timed, {}, report);
  const AutoTiming inference_timing{PlanOptions{}, [&](Plan& plan, const BenchConfig& cfg) {
                                      return run_benchmark(plan, inputs, cfg);
                                    }};
  if (auto_assign)  // per node, the candidate backend that makes the whole graph fastest
    if (Status st = add_auto_configs(o, timed, inference_timing, fallback, report, configs); !st.is_ok()) return fail(st);
  // Build every plan before timing anything: bad placements fail fast, with no partial output.
  std::vector<std::unique_ptr<Plan>> plans;
  for (auto& [label, placement] : configs) {
    PlanOptions po;
    po.deterministic = o.deterministic;
    auto plan = Plan::build(timed, placement, reg, po);
    if (!plan.ok()) return fail(explain_unsupported(plan.status(), g.value()));
    plans.push_back(std::move(plan.value()));
  }
  std::vector<Tensor> reference;
  if (o.check) {
    std::unique_ptr<Plan> naive_plan;
    Plan* ref = nullptr;
    for (size_t i = 0; i < configs.size() && !o.fuse; ++i)
      if (configs[i].first == "naive") ref = plans[i].get();
    if (!ref) {
      auto p = Plan::build(g.value(), Placement::all_on("naive", {}), reg);
      if (!p.ok()) return fail(p.status());
      naive_plan = std::move(p.value());
      ref = naive_plan.get();
    }
    std::cerr << "computing the naive reference output...\n";
    NodeProgress ref_progress("naive reference", ref->steps().size());
    Status st = ref->run(inputs, &reference, &ref_progress);
    if (!st.is_ok()) return fail(st);
  }
  bool all_ok = true;
  for (size_t i = 0; i < configs.size(); ++i) {
    Plan& plan = *plans[i];
    std::cerr << "benchmarking " << configs[i].first << "...\n";
    BenchConfig cfg = o.config;
    cfg.progress = "benchmarking " + configs[i].first;
    ConfigReport check;
    if (o.check) {
      std::vector<Tensor> outs;
      Status st = plan.run(inputs, &outs);
      if (!st.is_ok()) return fail(st);
      check.checked = true;
      for (size_t k = 0; k < outs.size(); ++k) {
        Agreement a = compare_tensors(outs[k], reference[k], o.rtol, o.atol);
        check.max_abs_err = std::max(check.max_abs_err, a.max_abs);
        check.max_rel_err = std::max(check.max_rel_err, a.max_rel);
        if (!a.ok && check.check_ok) {
          check.check_ok = false;
          check.check_message = "output '" + g->outputs[k].name + "' " + a.message;
        }
      }
      if (!check.check_ok) check.first_divergent_node = first_divergent(timed, reg, configs[i].second, inputs, o);
      all_ok = all_ok && check.check_ok;
    }
    plan.tracker().reset_peak();
    if (trace) trace->begin_config(configs[i].first, plan);
    auto r = run_benchmark(plan, inputs, cfg, trace);
    if (!r.ok()) return fail(r.status());
    add_config(report, configs[i].first, plan, r.value(), check);
  }
  if (auto_assign)  // the auto plan against the fastest single backend, in alternating rounds
    if (Status st = auto_side_by_side(o, configs, plans, inference_timing, report); !st.is_ok()) return fail(st);
  return emit_report(report, o, all_ok, "outputs", trace, db.value().get());
}

// ---- verify -------------------------------------------------------------------------------

namespace {

/// Prints a per-node table; returns whether every node that ran agreed.
bool print_per_node(const PerNodeReport& r, const std::string& backend, bool quiet) {
  int width = 12;
  for (const auto& n : r.nodes) width = std::max(width, static_cast<int>(n.node.size()));
  if (!quiet) {
    std::printf("%-*s %-18s %-8s %11s %11s %11s  %s\n", width, "node", "op", "backend", "max abs", "max rel", "rel L2",
                "verdict");
    for (const auto& n : r.nodes) {
      if (!n.ran) {
        std::printf("%-*s %-18s %-8s %11s %11s %11s  UNSUPPORTED %s\n", width, n.node.c_str(), n.op.c_str(),
                    n.backend.c_str(), "-", "-", "-", n.note.c_str());
        continue;
      }
      std::printf("%-*s %-18s %-8s %11.3g %11.3g %11.3g  %s\n", width, n.node.c_str(), n.op.c_str(), n.backend.c_str(),
                  n.max_abs, n.max_rel, n.rel_l2, n.ok ? "ok" : ("DIVERGES: " + n.note).c_str());
    }
  }
  int64_t kinks = 0;
  std::string kink_nodes;
  for (const auto& n : r.nodes)
    if (n.note_kinks) {
      kinks += n.note_kinks;
      kink_nodes += (kink_nodes.empty() ? "" : ", ") + n.node + " (" + std::to_string(n.note_kinks) + ")";
    }
  if (kinks)
    std::printf("note: %lld input elements exactly on a kink, where either one-sided gradient is right, were not "
                "compared: %s\n", static_cast<long long>(kinks), kink_nodes.c_str());
  if (r.first_divergent >= 0) {
    const NodeAgreement& n = r.nodes[r.first_divergent];
    std::printf("first divergent node on %s: '%s' (%s): max abs %.3g, max rel %.3g, rel L2 %.3g\n", backend.c_str(),
                n.node.c_str(), n.op.c_str(), n.max_abs, n.max_rel, n.rel_l2);
    return false;
  }
  int ran = 0;
  for (const auto& n : r.nodes) ran += n.ran;
  std::printf("all %d nodes that ran on %s agree with naive (%zu declined)\n", ran, backend.c_str(), r.nodes.size() - ran);
  return true;
}

int run_verify_determinism(const VerifyOptions& o, const std::vector<std::string>& backends) {
  if (o.paths.size() != 1) return fail(Status::invalid("--determinism takes one model (an ONNX file or zoo:NAME)"));
  auto g = load_prepared(o.paths[0], o.common, nullptr);
  if (!g.ok()) return fail(g.status());
  const std::vector<Tensor> inputs = random_inputs(g.value(), o.common.seed);
  const int threads = o.common.threads > 0 ? o.common.threads : omp_get_max_threads();
  bool repeat_ok = true;
  for (const auto& b : backends) {
    auto r = audit_determinism(g.value(), builtin_registry(), b, inputs, threads, o.deterministic);
    if (!r.ok()) return fail(r.status());
    auto summary = [](const std::vector<DeterminismRow>& rows, bool threads_axis) {
      int same = 0;
      int64_t worst = 0;
      for (const auto& row : rows) {
        const int64_t u = threads_axis ? row.threads_max_ulp : row.repeat_max_ulp;
        same += u == 0;
        worst = std::max(worst, u);
      }
      return std::to_string(same) + "/" + std::to_string(rows.size()) + " bitwise identical" +
             (worst ? " (max drift " + std::to_string(worst) + " ULP)" : "");
    };
    std::printf("== %s on %s%s: one training step, each run on a fresh plan\n", o.paths[0].c_str(), b.c_str(),
                o.deterministic ? " (deterministic plans)" : "");
    std::printf("repeated, %d threads:   forward %s; gradients %s\n", threads, summary(r->nodes, false).c_str(),
                summary(r->gradients, false).c_str());
    std::printf("%d threads vs 1:        forward %s; gradients %s\n", threads, summary(r->nodes, true).c_str(),
                summary(r->gradients, true).c_str());
    if (!o.quiet) {
      std::printf("%-40s %14s %14s\n", "node output / gradient", "repeat ULP", "vs 1 thread");
      for (const auto* rows : {&r->nodes, &r->gradients})
        for (const auto& row : *rows)
          std::printf("%-40s %14lld %14lld\n", row.what.c_str(), static_cast<long long>(row.repeat_max_ulp),
                      static_cast<long long>(row.threads_max_ulp));
    }
    for (const auto* rows : {&r->nodes, &r->gradients})
      for (const auto& row : *rows) repeat_ok = repeat_ok && row.repeat_max_ulp == 0;
  }
  // Drift is a finding, not a failure, unless deterministic plans were asked for: then a
  // repeat that differs breaks the promise.
  if (o.deterministic && !repeat_ok) {
    std::cerr << "mosaic: deterministic plans did not repeat bit for bit\n";
    return 1;
  }
  return 0;
}

int run_verify_per_node(const VerifyOptions& o, const std::vector<std::string>& backends) {
  if (o.paths.size() != 1) return fail(Status::invalid("--per-node takes one model (an ONNX file or zoo:NAME)"));
  set_num_threads(o.common.threads);
  auto g = load_prepared(o.paths[0], o.common, nullptr);
  if (!g.ok()) return fail(g.status());
  const std::vector<Tensor> inputs = random_inputs(g.value(), o.common.seed);
  bool all_ok = true;
  int ran = 0;
  for (const auto& b : backends) {
    std::printf("== %s: each node alone on %s vs naive (rtol %g, atol %g)\n", o.paths[0].c_str(), b.c_str(), o.rtol,
                o.atol);
    auto r = compare_per_node(g.value(), builtin_registry(), Placement::all_on(b, {}), inputs, o.rtol, o.atol);
    if (!r.ok()) return fail(r.status());
    all_ok = print_per_node(r.value(), b, o.quiet) && all_ok;
    for (const auto& n : r->nodes) ran += n.ran;
    // The backward of a training step too, where the model ends in [N, classes] logits.
    const Shape logits = g->value_descs.at(g->outputs[0].name).shape;
    if (logits.size() == 2 && g->value_descs.at(g->outputs[0].name).dtype == DType::kF32) {
      Tensor labels = Tensor::empty({DType::kI64, {logits[0]}});
      for (int64_t i = 0; i < logits[0]; ++i) labels.i64()[i] = i % logits[1];
      std::printf("== %s: each node's backward alone on %s vs naive (same inputs and output gradients)\n",
                  o.paths[0].c_str(), b.c_str());
      auto rb = compare_per_node_backward(g.value(), builtin_registry(), Placement::all_on(b, {}), inputs, labels,
                                          o.rtol, o.atol);
      if (!rb.ok()) return fail(rb.status());
      all_ok = print_per_node(rb.value(), b, o.quiet) && all_ok;
    }
  }
  if (!all_ok) return 1;
  if (ran == 0) {
    std::cerr << "mosaic: nothing was verified: no node ran on " << join(backends) << "\n";
    return 3;
  }
  return 0;
}

enum class Verdict { kPassed, kFailed, kUnsupported };

struct CaseResult {
  Verdict verdict = Verdict::kPassed;
  std::string detail;
};

CaseResult classify(const Status& st) {
  return {st.code() == StatusCode::kUnsupported ? Verdict::kUnsupported : Verdict::kFailed, st.message()};
}

std::vector<std::string> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, std::string>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0 && e.path().extension() == ".pb")
      found.emplace_back(std::atoi(n.c_str() + prefix.size()), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

CaseResult run_case(const fs::path& dir, const std::string& backend, const VerifyOptions& o) {
  auto g = load_onnx((dir / "model.onnx").string());
  if (!g.ok()) return classify(g.status());
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {Verdict::kFailed, "no test_data_set_* directory"};
  CaseResult result;
  double worst = 0;
  for (const auto& set : sets) {
    std::vector<Tensor> inputs, expected;
    for (const auto& f : sorted_files(set, "input_")) {
      auto t = load_tensor_pb(f);
      if (!t.ok()) return classify(t.status());
      inputs.push_back(t.value());
    }
    Graph graph = g.value();
    if (inputs.size() != graph.inputs.size())
      return {Verdict::kFailed, "model has " + std::to_string(graph.inputs.size()) + " inputs, data set has " +
                                    std::to_string(inputs.size())};
    // The data set fixes the input shapes; int64 inputs are shape arguments (Reshape's
    // shape, Slice's starts, ...) and are bound as load-time constants.
    PrepareOptions po;
    std::vector<Tensor> runtime_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      graph.inputs[i].dims = inputs[i].shape();
      graph.inputs[i].has_shape = true;
      graph.inputs[i].dtype = inputs[i].dtype();
      if (inputs[i].dtype() == DType::kI64) po.constant_inputs[graph.inputs[i].name] = inputs[i];
      else runtime_inputs.push_back(inputs[i]);
    }
    auto pr = prepare_graph(graph, builtin_registry(), po);
    if (!pr.ok()) return classify(pr.status());
    for (const auto& f : sorted_files(set, "output_")) {
      auto t = load_tensor_pb(f);
      if (!t.ok()) return classify(t.status());
      expected.push_back(t.value());
    }
    inputs = runtime_inputs;
    auto plan = Plan::build(graph, Placement::all_on(backend, {}), builtin_registry());
    if (!plan.ok()) return classify(plan.status());
    std::vector<Tensor> outs;
    Status st = plan.value()->run(inputs, &outs);
    if (!st.is_ok()) return classify(st);
    if (outs.size() != expected.size())
      return {Verdict::kFailed, "produced " + std::to_string(outs.size()) + " outputs, expected " +
                                    std::to_string(expected.size())};
    for (size_t k = 0; k < outs.size(); ++k) {
      Agreement a = compare_tensors(outs[k], expected[k], o.rtol, o.atol);
      worst = std::max(worst, a.max_abs);
      if (!a.ok)
        return {Verdict::kFailed, set.filename().string() + " output " + std::to_string(k) + ": " + a.message};
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "max abs err %.3g", worst);
  result.detail = buf;
  return result;
}

}  // namespace

int run_verify(const VerifyOptions& o) {
  std::vector<std::string> backends;
  if (o.backend == "all") backends = builtin_registry().backends();
  else if (builtin_registry().has_backend(o.backend)) backends = {o.backend};
  else return fail(Status::invalid("unknown backend '" + o.backend + "' (known: " + join(builtin_registry().backends()) + ", all)"));
  if (o.per_node && o.determinism) return fail(Status::invalid("--per-node and --determinism are separate audits: give one"));
  if (o.deterministic && !o.determinism) return fail(Status::invalid("--deterministic only applies to --determinism"));
  if (!o.junit.empty() && (o.per_node || o.determinism))
    return fail(Status::invalid("--junit applies to conformance cases, not to --per-node or --determinism"));
  if (Status st = check_output_paths({{"--junit", o.junit}}); !st.is_ok()) return fail(st);
  if (o.per_node) return run_verify_per_node(o, backends);
  if (o.determinism) return run_verify_determinism(o, backends);
  // POSIX extended regular expression.
  regex_t filter;
  if (regcomp(&filter, o.filter.empty() ? "." : o.filter.c_str(), REG_EXTENDED | REG_NOSUB) != 0)
    return fail(Status::invalid("--filter '" + o.filter + "' is not a valid regular expression"));
  struct Free {
    regex_t* r;
    ~Free() { regfree(r); }
  } free_filter{&filter};
  std::vector<fs::path> cases;
  for (const auto& p : o.paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) return fail(Status::not_found(p + ": not a directory (expected a test case or suite)"));
    if (fs::exists(fs::path(p) / "model.onnx")) {
      cases.push_back(p);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) found.push_back(e.path());
    if (found.empty()) return fail(Status::not_found(p + ": contains no model.onnx nor test case directories"));
    std::sort(found.begin(), found.end());
    cases.insert(cases.end(), found.begin(), found.end());
  }
  int passed = 0, failed = 0, skipped = 0;
  std::vector<JUnitCase> junit;
  for (const auto& c : cases) {
    const std::string name = c.filename().string();
    if (regexec(&filter, name.c_str(), 0, nullptr, 0) != 0) continue;
    for (const auto& b : backends) {
      const int64_t t0 = now_ns();
      CaseResult r = run_case(c, b, o);
      junit.push_back({"verify [" + b + "]", name,
                       r.verdict == Verdict::kPassed   ? JUnitCase::Outcome::kPass
                       : r.verdict == Verdict::kFailed ? JUnitCase::Outcome::kFail
                                                       : JUnitCase::Outcome::kSkipped,
                       r.detail, static_cast<double>(now_ns() - t0) / 1e9});
      const char* tag = r.verdict == Verdict::kPassed ? "PASSED" : r.verdict == Verdict::kFailed ? "FAILED" : "UNSUPPORTED";
      (r.verdict == Verdict::kPassed ? passed : r.verdict == Verdict::kFailed ? failed : skipped)++;
      if (!o.quiet || r.verdict == Verdict::kFailed)
        std::cout << tag << " " << name << " [" << b << "] " << r.detail << "\n";
    }
  }
  if (passed + failed + skipped == 0)
    return fail(Status::not_found("--filter '" + o.filter + "' matches none of the " + std::to_string(cases.size()) +
                                  " cases: nothing was verified"));
  std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  if (!o.junit.empty())
    if (Status st = write_junit(o.junit, "mosaic verify", junit); !st.is_ok()) return fail(st);
  if (failed) return 1;
  if (passed == 0) {
    std::cerr << "mosaic: nothing was verified: all " << skipped << " case runs were UNSUPPORTED on " << join(backends)
              << "\n";
    return 3;
  }
  return 0;
}

// ---- backends ------------------------------------------------------------------------------

int run_backends(bool markdown, bool names_only) {
  const auto& reg = builtin_registry();
  const auto backends = reg.backends();
  if (names_only) {
    for (const auto& b : backends) std::cout << b << "\n";
    return 0;
  }
  for (const auto& b : backends) {
    const BackendInfo* info = reg.info(b);
    std::string libraries;
    if (info->details)
      for (const auto& [library, version] : info->details())
        libraries += (libraries.empty() ? "" : ", ") + library + " " + version;
    if (markdown)
      std::cout << "- **" << b << "**: " << info->summary << (libraries.empty() ? "" : " (" + libraries + ")") << "\n";
    else
      std::printf("%-8s %s%s\n", b.c_str(), info->summary.c_str(), libraries.empty() ? "" : ("\n         " + libraries).c_str());
  }
  std::cout << "\n";
  if (markdown) {
    std::cout << "| op |";
    for (const auto& b : backends) std::cout << " " << b << " |";
    std::cout << "\n|---|";
    for (size_t i = 0; i < backends.size(); ++i) std::cout << "---|";
    std::cout << "\n";
  }
  for (const auto& op : schema_names()) {
    if (markdown) std::cout << "| " << op << " |";
    else std::printf("%-20s", op.c_str());
    for (const auto& b : backends) {
      const KernelTraits* t = reg.traits(b, op);
      std::string cell = !t                                       ? "-"
                         : t->layouts == LayoutUse::kTraining  ? "yes (layouts, training too)"
                         : t->layouts == LayoutUse::kInference ? "yes (layouts)"
                                                                : "yes";
      if (markdown) std::cout << " " << cell << " |";
      else std::printf(" %-8s:%-14s", b.c_str(), cell.c_str());
    }
    std::cout << "\n";
  }
  return 0;
}

// ---- export -------------------------------------------------------------------------------

int run_export(const ExportOptions& o) {
  auto g = build_zoo_model(o.name, o.seed);
  if (!g.ok()) return fail(g.status());
  Status st = save_onnx(g.value(), o.output);
  if (!st.is_ok()) return fail(st);
  std::cout << "wrote " << o.output << ": " << zoo_description(o.name) << "\n";
  return 0;
}

}  // namespace mosaic::cli
