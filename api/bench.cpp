#include "api/bench.hpp"
#include "api/quantize.hpp"
#include "api/verify.hpp"
#include "metrics/calibration.hpp"

#include "operators/attention.hpp"
#include "ir/interrupt.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <random>

#include "api/bench_auto.hpp"
#include "api/option_rules.hpp"
#include "backends/machine_probe.hpp"
#include "backends/registry.hpp"
#include "core/fuse.hpp"
#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "frontends/onnx/shape_check.hpp"
#include "distributed/data_parallel.hpp"
#include "metrics/compare.hpp"
#include "metrics/progress.hpp"
#include "operators/attention.hpp"
#include "validate/per_node.hpp"

namespace mosaic::api {
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
  c.top1_agreement = check.top1_agreement;
  c.sqnr_db = check.sqnr_db;
  c.precision = check.precision == "int8" ? "int8" : precision_name(plan.options().precision);
  c.first_divergent_node = check.first_divergent_node;
  c.peak_tracked_bytes = plan.tracker().peak();
  // The devices' own view right after the timed run (utilisation over their last sample
  // period, clocks, power).
  for (const auto& d : plan.devices())
    if (auto s = d->sample(); !s.empty()) c.device_state[d->name()] = std::move(s);
  report.configs.push_back(std::move(c));
}

/// The figures derived once every configuration is timed: speed-ups, sanity notes, peak RSS.
void finish_report(BenchReport& report) {
  fill_speedups(report, 0);
  for (auto& n : peak_sanity_notes(report)) report.notes.push_back(std::move(n));
  report.peak_rss_bytes = peak_rss_bytes();
}

/// After a configuration was added: tells o.on_config_done (the CLI prints it at once) and says
/// whether to stop (SIGINT/SIGTERM: the configurations not yet timed are not run).
bool config_done(const BenchOptions& o, BenchReport& report, const BenchResult& r, dist::DataParallel* dp = nullptr) {
  fill_speedups(report, 0);
  // The ranks of a data-parallel run agree (a signal may reach one after the last iteration).
  report.interrupted = report.interrupted || r.interrupted || (dp ? dp->on_any_worker(interrupted()) : interrupted());
  if (o.on_config_done) o.on_config_done(report);
  return report.interrupted;
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

/// The placements of a run's configurations: one graph is fused for all of them.
std::vector<Placement> placements_of(const BenchConfigs& configs) {
  std::vector<Placement> out;
  for (const auto& c : configs) out.push_back(c.second);
  return out;
}

/// Applies the fusion pass to the graph the timed plans run, noting what it merged.
void fuse_for_bench(Graph& timed, const FuseOptions& fo, BenchReport& report) {
  FuseReport fr = fuse_graph(timed, fo);
  if (!fr.fused.empty())
    report.notes.push_back("fused " + std::to_string(fr.fused.size()) + " node pairs (--no-fuse to disable): " +
                           join(fr.fused));
  if (!fr.reordered.empty())
    report.notes.push_back("reordered " + std::to_string(fr.reordered.size()) +
                           " Relu -> MaxPool pairs (a zero Pad between as the pool's padding), exact (--no-fuse to disable): " + join(fr.reordered));
}

void say(const BenchOptions& o, const std::string& line) {
  if (o.verbose) std::cerr << line << "\n";
}

BenchConfig timed_config(const BenchOptions& o, const std::string& label) {
  BenchConfig cfg = o.config;
  if (o.verbose) cfg.progress = "benchmarking " + label;
  return cfg;
}

/// The peaks of the devices `plans` compute on (Device::measure_peaks), measured once per
/// device and process; a device without them gets a note, and its steps no % of peak.
void add_device_peaks(const BenchOptions& o, const std::vector<std::unique_ptr<Plan>>& plans, BenchReport& report) {
  static std::mutex mu;
  static std::map<const Device*, std::pair<Device::Peaks, std::string>> measured;  // peaks, or why not
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& plan : plans)
    for (const auto& d : plan->devices()) {
      if (report.device_peaks.count(d->name())) continue;
      auto it = measured.find(d.get());
      if (it == measured.end()) {
        say(o, "measuring " + d->name() + "'s peaks (once per process)...");
        auto p = d->measure_peaks();
        it = measured.emplace(d.get(), p.ok() ? std::make_pair(p.value(), std::string())
                                              : std::make_pair(Device::Peaks{}, p.status().message()))
                 .first;
      }
      if (it->second.second.empty()) {
        report.device_peaks[d->name()] = it->second.first;
      } else {
        const std::string note = d->name() + " has no measured peaks (" + it->second.second + "): its steps get no % of peak";
        if (std::find(report.notes.begin(), report.notes.end(), note) == report.notes.end()) report.notes.push_back(note);
      }
    }
}

/// The configurations of --precision: every one in float32 (f32); in bf16 (or tf32, fp16),
/// labelled LABEL-bf16 (LABEL-tf32, LABEL-fp16), those whose backends all accept it, the others left out with their
/// reasons; or each float32 one followed by its bf16 twin where accepted (both). `from` maps
/// each kept configuration to the one it came from.
struct PrecisionConfigs {
  BenchConfigs configs;
  std::vector<size_t> from;
  std::vector<Precision> precision;
};
Expected<PrecisionConfigs> precision_configs(const BenchOptions& o, const BenchConfigs& configs, BenchReport& report) {
  PrecisionConfigs out;
  auto keep = [&](const std::string& label, size_t i, Precision p) {
    out.configs.emplace_back(label, configs[i].second);
    out.from.push_back(i);
    out.precision.push_back(p);
  };
  if (o.precision == "f32" || o.precision == "int8") {  // int8's twins are added on their own model
    for (size_t i = 0; i < configs.size(); ++i) keep(configs[i].first, i, Precision::kF32);
    return out;
  }
  const auto& reg = builtin_registry();
  const Precision reduced = o.precision == "both" ? Precision::kBF16 : parse_precision(o.precision).value();
  const std::string name = precision_name(reduced);
  std::vector<std::string> declined;
  for (size_t i = 0; i < configs.size(); ++i) {
    std::string why;
    for (const auto& b : configs[i].second.asked_backends()) {
      const BackendInfo* info = reg.info(b);
      const std::string declined_by = info ? precision_declined(*info, reduced) : "";
      if (!declined_by.empty() && why.empty()) why = (b == configs[i].first ? "" : b + ": ") + declined_by;
    }
    if (o.precision == "both") keep(configs[i].first, i, Precision::kF32);
    if (!why.empty()) {
      declined.push_back(configs[i].first + " (" + why + ")");
      continue;
    }
    keep(configs[i].first + "-" + name, i, reduced);
  }
  if (!declined.empty())
    report.notes.push_back(name + " declined by " + join(declined, "; ") + (o.precision == "both" ? ": float32 only" : ": left out"));
  if (std::count(out.precision.begin(), out.precision.end(), reduced) == 0)
    return Status::unsupported("`precision` " + o.precision + ": no configuration can compute in " + name + ": " +
                               join(declined, "; "));
  return out;
}

/// An inference configuration's outputs against `want` (naive's on the same model), into
/// `check`. Float32: within rtol and atol element-wise. bf16, tf32: within
/// reduced_precision_tolerance of the output's scale (its elements' relative errors mean
/// nothing near zero). int8: within kInt8Tolerance of the scale against naive on the QDQ model
/// (a float sum on a rounding edge moves a code by one step), with its top-1 agreement and
/// SQNR against `float32` (naive's float32 outputs).
void check_outputs(const BenchOptions& o, const Graph& g, const std::vector<Tensor>& outs, const std::vector<Tensor>& want,
                   const std::vector<Tensor>& float32, Precision p, bool int8, ConfigReport& check) {
  check.checked = true;
  const bool reduced = p != Precision::kF32 || int8;
  const double tolerance = int8 ? kInt8Tolerance : reduced_precision_tolerance(p);
  if (reduced) check.top1_agreement = top1_agreement(outs[0], float32[0]);
  if (int8 && outs[0].dtype() == DType::kF32 && outs[0].desc() == float32[0].desc())
    check.sqnr_db = sqnr_db(outs[0].f32(), float32[0].f32(), outs[0].numel());
  // A quantised model's outputs: one quantisation step, where two correct computations may
  // round a tie differently (verify's rule; api/verify.hpp).
  const std::vector<double> steps = quantisation_steps(g);
  for (size_t k = 0; k < outs.size(); ++k) {
    const double scale = reduced ? max_abs(want[k]) : 0.0;
    const double step = k < steps.size() ? steps[k] * (1 + 1.0 / (1 << 20)) : 0.0;
    Agreement a = reduced ? compare_tensors(outs[k], want[k], 0.0, tolerance * scale + 1e-6)
                          : compare_tensors(outs[k], want[k], o.rtol, std::max(o.atol, step));
    check.max_abs_err = std::max(check.max_abs_err, a.max_abs);
    check.max_rel_err = std::max(check.max_rel_err, reduced ? a.max_abs / std::max(scale, 1e-12) : a.max_rel);
    if (!a.ok && check.check_ok) {
      check.check_ok = false;
      check.check_message = "output '" + g.outputs[k].name + "' " + a.message;
    }
  }
}

/// --precision int8: each configuration followed by its twin "LABEL-int8", the same placement
/// on `int8[i]` (the QDQ model, fused for that configuration); the per-configuration lists
/// follow, `is_int8` marking the twins.
void add_int8_twins(const std::vector<std::unique_ptr<Graph>>& int8, BenchConfigs& configs,
                    std::vector<const Graph*>& graph_of, std::vector<Precision>& precision_of, std::vector<bool>& is_int8) {
  BenchConfigs all;
  std::vector<const Graph*> graphs;
  std::vector<Precision> precisions;
  is_int8.clear();
  for (size_t i = 0; i < configs.size(); ++i)
    for (bool q : {false, true}) {
      all.emplace_back(configs[i].first + (q ? "-int8" : ""), configs[i].second);
      graphs.push_back(q ? int8[i].get() : graph_of[i]);
      precisions.push_back(precision_of[i]);
      is_int8.push_back(q);
    }
  configs = std::move(all);
  graph_of = std::move(graphs);
  precision_of = std::move(precisions);
}

/// A training configuration's loss and gradients against naive's: the loss within rtol (bf16:
/// kBf16Tolerance) of its value; each gradient on the scale of its largest element, within 1% of
/// it (bf16: within kBf16GradientTolerance in relative L2).
void compare_gradients(const BenchOptions& o, double loss, double ref_loss, const std::vector<Tensor>& grads,
                       const std::vector<Tensor>& ref_grads, const std::vector<ParamRef>& params, bool bf16,
                       ConfigReport& check) {
  check.checked = true;
  check.max_abs_err = std::fabs(loss - ref_loss);
  // bf16: the loss within kBf16Tolerance of its value, each gradient within
  // kBf16GradientTolerance (relative L2) of naive's.
  if (check.max_abs_err > (bf16 ? kBf16Tolerance : o.rtol) * std::fabs(ref_loss) + 1e-6) {
    check.check_ok = false;
    check.check_message = "loss " + std::to_string(loss) + " vs " + std::to_string(ref_loss);
  }
  for (size_t k = 0; k < grads.size(); ++k) {
    // Gradients compare on the scale of the largest gradient of the tensor. A weight
    // gradient sums batch x positions products in float (65,536 for AlexNet-CIFAR's conv1 at
    // batch 64) and its small elements are cancellations of them, so the tolerance is 1% of
    // that scale: ample to catch a wrong or missing term, which errs by the scale itself.
    // Tight agreement is gradcheck's job.
    if (bf16) {
      // bf16: the relative L2 distance, since rounding flips ReLU masks and MaxPool choices,
      // which moves single elements by their whole size (kBf16GradientTolerance).
      const double rel = relative_l2(grads[k], ref_grads[k]);
      check.max_rel_err = std::max(check.max_rel_err, rel);
      if (rel > kBf16GradientTolerance && check.check_ok) {
        check.check_ok = false;
        char why[160];
        std::snprintf(why, sizeof why, "differs from naive's float32 by %.1f%% (relative L2; bf16 rounding stays within %.0f%%)",
                      100 * rel, 100 * kBf16GradientTolerance);
        check.check_message = "gradient of '" + params[k].name + "' " + why;
      }
      continue;
    }
    double scale = 0;
    for (int64_t e = 0; e < ref_grads[k].numel(); ++e) scale = std::max(scale, std::fabs(ref_grads[k].get(e)));
    Agreement a = compare_tensors(grads[k], ref_grads[k], o.rtol, 1e-2 * scale + 1e-9);
    check.max_rel_err = std::max(check.max_rel_err, a.max_abs / std::max(scale, 1e-12));
    if (!a.ok && check.check_ok) {
      check.check_ok = false;
      check.check_message = "gradient of '" + params[k].name + "' " + a.message;
    }
  }
}

/// A data-parallel configuration's figures: the exchange's report, the global batch and
/// throughput, and whether every rank holds the same parameters (rank 0 prints them).
nlohmann::json data_parallel_figures(const BenchOptions& o, dist::DataParallel& dp, Plan& plan, const BenchResult& r,
                                     int64_t batch, const std::string& label) {
  double seconds = 0;
  for (double ns : r.iteration_ns) seconds += ns / 1e9;
  nlohmann::json d = dp.report(seconds, static_cast<int64_t>(r.iteration_ns.size()) * batch);
  const double median_s = r.iteration.median / 1e9;
  d["global_batch"] = batch * dp.size();
  d["global_images_per_s"] = median_s > 0 ? static_cast<double>(batch * dp.size()) / median_s : 0.0;
  d["parameters_identical"] = dp.parameters_identical(plan.parameters());
  if (dp.world_rank() == 0 && o.verbose)
    std::printf("%s: data-parallel %s, %d ranks x batch %lld: %.1f images/s global (median step %.2f ms), parameters "
                "identical on every rank: %s\n",
                label.c_str(), dp.mode().c_str(), dp.size(), static_cast<long long>(batch),
                d["global_images_per_s"].get<double>(), 1e3 * median_s,
                d["parameters_identical"].get<bool>() ? "yes" : "NO");
  return d;
}

/// Training benchmark: each iteration is forward, loss, backward and an optimizer step.
/// Before timing, every plan's loss and parameter gradients on the same batch are compared
/// with the naive plan's.
Status run_training_bench(const BenchOptions& o, BenchConfigs configs, const std::vector<std::string>& fallback,
                          Graph& g, const std::vector<Tensor>& inputs, Tensor labels, BenchOutcome& out,
                          dist::DataParallel* dp) {
  BenchReport& report = out.report;
  TraceRecorder* trace = out.trace.get();
  const auto& reg = builtin_registry();
  const Shape shape = g.value_descs.at(g.outputs[0].name).shape;
  if (shape.size() < 2)
    return Status::invalid(g.source + ": training needs a first output of shape [N, C] or [N, T, V] (per token)");
  if (!labels.defined()) {  // a label per row of the last axis
    labels = Tensor::empty({DType::kI64, Shape(shape.begin(), shape.end() - 1)});
    std::mt19937_64 rng(o.common.seed + 1);
    for (int64_t i = 0; i < labels.numel(); ++i)
      labels.i64()[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(shape.back()));
  } else {
    report.notes.push_back("labels: the same images' labels");
  }
  PlanOptions po;
  po.training = true;
  po.seed = o.common.seed;
  po.deterministic = o.deterministic;
  // A parameter only a device's kernels read lives there with its gradient, updated there
  // (Plan::optimizer_step); data-parallel runs exchange gradients on the host and keep them all there.
  po.resident_parameters = dp == nullptr;
  po.loss_on_device = dp == nullptr;  // and the logits, the loss computed there (Plan::loss)
  // Timed plans get a training plan's rewrites (fuse_options_for: zero padding folded, a Relu
  // before a MaxPool run after it; activations stay separate, fused ones have no backward);
  // the naive reference trains the graph as loaded.
  Graph timed = g;
  if (o.fuse) fuse_for_bench(timed, fuse_options_for(placements_of(configs), reg, true), report);
  OptimizerConfig oc;
  oc.lr = o.lr;
  const AutoTiming timing{po, [&](Plan& plan, const BenchConfig& cfg) -> Expected<BenchResult> {
                            MOSAIC_ASSIGN_OR_RETURN(auto opt, make_optimizer(o.optimizer, oc));
                            return run_training_benchmark(plan, inputs, labels, *opt, cfg);
                          }, o.auto_budget, {}};
  const bool auto_assign = o.assign == "auto";
  if (auto_assign)  // per node, the candidate backend that makes the whole training step fastest
    MOSAIC_RETURN_IF_ERROR(add_auto_configs(o, timed, timing, fallback, report, configs));
  // --precision bf16/both: mixed precision (bf16 products, float32 parameters, gradients and
  // optimizer state), labelled LABEL-bf16.
  MOSAIC_ASSIGN_OR_RETURN(const PrecisionConfigs pc, precision_configs(o, configs, report));
  configs = pc.configs;
  std::vector<std::unique_ptr<Plan>> plans;
  dist::DetachOnExit detach{dp};  // before the plan(s) go
  for (size_t i = 0; i < configs.size(); ++i) {
    PlanOptions cpo = po;
    cpo.precision = pc.precision[i];
    auto plan = Plan::build(timed, configs[i].second, reg, cpo);
    if (!plan.ok()) return explain_unsupported(plan.status(), g);
    plans.push_back(std::move(plan.value()));
  }
  // One forward/backward on `plan`: its loss and its parameters' gradients (copied).
  auto gradients = [&](Plan& plan, double* loss, std::vector<Tensor>* grads) -> Status {
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr));
    MOSAIC_ASSIGN_OR_RETURN(LossValue l, plan.loss("cross-entropy", labels));
    *loss = l.loss;
    MOSAIC_RETURN_IF_ERROR(plan.backward_from_loss());
    for (const auto& p : plan.parameters()) grads->push_back(p.grad.clone());
    return Status::ok();
  };
  double ref_loss = 0;
  std::vector<Tensor> ref_grads;
  if (o.check) {
    MOSAIC_ASSIGN_OR_RETURN(auto ref, Plan::build(g, Placement::all_on("naive", {}), reg, po));
    say(o, "computing the naive reference gradients...");
    MOSAIC_RETURN_IF_ERROR(gradients(*ref, &ref_loss, &ref_grads));
  }
  // Checks first, so the reference gradients are released before anything is timed.
  std::vector<ConfigReport> checks(configs.size());
  for (size_t i = 0; i < configs.size() && o.check; ++i) {
    ConfigReport& check = checks[i];
    double loss = 0;
    std::vector<Tensor> grads;
    MOSAIC_RETURN_IF_ERROR(gradients(*plans[i], &loss, &grads));
    const bool bf16 = pc.precision[i] == Precision::kBF16;
    compare_gradients(o, loss, ref_loss, grads, ref_grads, plans[i]->parameters(), bf16, check);
    // (The per-node search compares float32 plans; a bf16 configuration's message stands alone.)
    if (!check.check_ok && !bf16)
      check.first_divergent_node = first_divergent(timed, reg, configs[i].second, inputs, o, &labels);
    out.checks_ok = out.checks_ok && check.check_ok;
  }
  ref_grads.clear();
  ref_grads.shrink_to_fit();
  // The plans own copies of the float initializers; the loaded ones would only add to the
  // process's memory while timing (after the checks: a failed one re-plans the graph to find
  // the first divergent node).
  g.release_float_initializers();
  timed.release_float_initializers();
  for (size_t i = 0; i < configs.size(); ++i) {
    Plan& plan = *plans[i];
    say(o, "benchmarking " + configs[i].first + " (training)...");
    BenchConfig cfg = timed_config(o, configs[i].first);
    MOSAIC_ASSIGN_OR_RETURN(auto opt, make_optimizer(o.optimizer, oc));
    plan.tracker().reset_peak();
    if (trace) trace->begin_config(configs[i].first, plan);
    if (dp) {  // every rank starts from rank 0's parameters; fixed iteration counts (no budget)
      MOSAIC_RETURN_IF_ERROR(dp->attach(plan));
      cfg.max_seconds = 1e7;
      cfg.should_stop = [dp] { return dp->on_any_worker(interrupted()); };  // all ranks after the same iteration
    }
    MOSAIC_ASSIGN_OR_RETURN(BenchResult r, run_training_benchmark(plan, inputs, labels, *opt, cfg, trace,
                                                                  dp ? dp->gradient_exchange() : nullptr));
    add_config(report, configs[i].first, plan, r, checks[i]);
    if (config_done(o, report, r, dp)) break;
    if (dp) report.distributed[configs[i].first] = data_parallel_figures(o, *dp, plan, r, report.batch, configs[i].first);
  }
  if (dp && dp->world_rank() != 0) {  // rank 0 reports
    out.reporting_rank = false;
    return Status::ok();
  }
  if (auto_assign)  // the auto plan against the fastest single backend, in alternating rounds
    MOSAIC_RETURN_IF_ERROR(auto_side_by_side(o, configs, plans, timing, report));
  return Status::ok();
}

/// Attention fuses per configuration, where its backend has the kernel: each configuration's
/// graph is `timed` or a fused copy of it (kept in `fused_graphs`); with --attention both, the
/// plain graph's twin follows each configuration that fused. A note says where it fused.
size_t count_op(const Graph& g, const char* op) {
  return static_cast<size_t>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op_type == op; }));
}

/// The nodes the integer rewrites make (core/fuse_qdq.cpp, core/fuse_dynamic.cpp).
size_t integer_products(const Graph& g) {
  return count_op(g, "QLinearConv") + count_op(g, "QLinearMatMul") + count_op(g, "MatMulIntegerToFloat");
}

/// A quantised model's products as integer ones, per configuration: where a configuration's
/// backend takes QLinearConv for a QDQ convolution (core/fuse_qdq.cpp) or
/// MatMulIntegerToFloat for a dynamic model's MatMulInteger chain (core/fuse_dynamic.cpp), it
/// runs a copy of its graph with those groups rewritten, kept in `fused_graphs`; elsewhere
/// the graph as it was.
void fuse_integer_per_config(const BenchConfigs& configs, std::vector<const Graph*>& graph_of,
                             std::vector<std::unique_ptr<Graph>>& fused_graphs) {
  for (size_t i = 0; i < configs.size(); ++i) {
    if (count_op(*graph_of[i], "QuantizeLinear") + count_op(*graph_of[i], "MatMulInteger") == 0) continue;
    FuseOptions fo;
    fo.activations = fo.batch_norm = fo.layer_norm = fo.gelu = false;
    fo.integer = fuse_options_for(configs[i].second, builtin_registry(), false).integer;
    fo.oracle = &builtin_registry();
    auto fused = std::make_unique<Graph>(*graph_of[i]);
    fuse_graph(*fused, fo);
    if (integer_products(*fused) <= integer_products(*graph_of[i])) continue;
    graph_of[i] = fused.get();
    fused_graphs.push_back(std::move(fused));
  }
}

void fuse_attention_per_config(const BenchOptions& o, const Graph& timed, BenchConfigs& configs,
                               std::vector<const Graph*>& graph_of, std::vector<std::unique_ptr<Graph>>& fused_graphs,
                               BenchReport& report) {
  const auto& reg = builtin_registry();
  BenchConfigs all;
  std::vector<const Graph*> all_graphs;
  size_t fused_nodes = 0;
  std::string where;
  const auto attention_nodes = [](const Graph& g) {
    return static_cast<size_t>(
        std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op_type == kAttentionOp; }));
  };
  const size_t attention_before = attention_nodes(timed);
  for (size_t i = 0; i < configs.size(); ++i) {
    FuseOptions fo;
    fo.activations = fo.batch_norm = fo.layer_norm = fo.gelu = false;
    fo.attention = fuse_options_for(configs[i].second, reg, false).attention;
    auto fused = std::make_unique<Graph>(timed);
    fuse_graph(*fused, fo);
    // Whether attention was fused for this configuration: its graph has more FusedAttention
    // nodes than the timed one (the report of fuse_graph also names the nodes the timed graph
    // had fused already).
    const size_t fused_here = attention_nodes(*fused);
    all.push_back(configs[i]);
    all_graphs.push_back(fused_here > attention_before ? fused.get() : &timed);
    if (fused_here <= attention_before) continue;
    fused_nodes = fused_here;
    where += (where.empty() ? "" : ", ") + configs[i].first;
    fused_graphs.push_back(std::move(fused));
    if (o.attention == "both") {
      all.emplace_back(configs[i].first + "-unfused-attention", configs[i].second);
      all_graphs.push_back(&timed);
    }
  }
  if (fused_nodes)
    report.notes.push_back("attention: " + std::to_string(fused_nodes) + " MatMul-scale-mask-Softmax-MatMul chains run as "
                           "one FusedAttention node on " + where + (o.attention == "both" ? " (each beside its unfused twin)"
                           : " (--attention both times the unfused graph beside it)"));
  configs = std::move(all);
  graph_of = std::move(all_graphs);
}

/// Inference benchmark: each configuration's outputs are compared with the naive plan's,
/// then its forward pass is timed.
Status run_inference_bench(const BenchOptions& o, BenchConfigs configs, const std::vector<std::string>& fallback,
                           const Graph& g, const Graph* int8, const std::vector<Tensor>& inputs, BenchOutcome& out) {
  BenchReport& report = out.report;
  TraceRecorder* trace = out.trace.get();
  const auto& reg = builtin_registry();
  // Timed plans run the optimised graph; the naive reference runs the graph as loaded.
  Graph timed = g;
  if (o.fuse) {
    const std::vector<Placement> placements = placements_of(configs);
    FuseOptions fo;
    fo.apart = apart_in(placements);
    // RMSNorm and SiLU become one node each (a Linear layer one Gemm) where every configuration's backend for it has
    // the kernel; elsewhere the decomposition stays (on a device without the kernel).
    fo.rms_norm = where_kernel(placements, reg, "RMSNormalization");
    fo.swish = where_kernel(placements, reg, "Swish");
    fo.linear = where_kernel(placements, reg, "Gemm");
    fuse_for_bench(timed, fo, report);
  }
  const AutoTiming inference_timing{PlanOptions{}, [&](Plan& plan, const BenchConfig& cfg) {
                                      return run_benchmark(plan, inputs, cfg);
                                    }, o.auto_budget, {}};
  const bool auto_assign = o.assign == "auto";
  if (auto_assign)  // per node, the candidate backend that makes the whole graph fastest
    MOSAIC_RETURN_IF_ERROR(add_auto_configs(o, timed, inference_timing, fallback, report, configs));
  std::vector<std::unique_ptr<Graph>> attention_graphs;  // per configuration, the graphs attention or integer ops fused in
  std::vector<const Graph*> graph_of(configs.size(), &timed);
  if (o.fuse && o.attention != "unfused") fuse_attention_per_config(o, timed, configs, graph_of, attention_graphs, report);
  if (o.fuse) fuse_integer_per_config(configs, graph_of, attention_graphs);
  // Its outputs are checked as an int8 twin's (a QDQ model, or a dynamic one: its
  // DynamicQuantizeLinear codes move by a step where a float sum lands on a rounding edge).
  const bool quantised_model = count_op(g, "QuantizeLinear") + count_op(g, "DynamicQuantizeLinear") > 0;
  if (o.check && !int8 && quantised_model)
    report.notes.push_back("a quantised model: each output is checked within 3% of its scale against naive's, as an int8 "
                           "twin is (a float sum on a rounding edge moves a code by one step, and the step carries on)");
  // --precision bf16/both: which configurations compute in bf16 (precision_configs).
  MOSAIC_ASSIGN_OR_RETURN(const PrecisionConfigs pc, precision_configs(o, configs, report));
  std::vector<const Graph*> kept_graphs;
  for (size_t from : pc.from) kept_graphs.push_back(graph_of[from]);
  configs = pc.configs;
  graph_of = std::move(kept_graphs);
  std::vector<Precision> precision_of = pc.precision;
  // --precision int8: each configuration followed by its twin on the int8 QDQ model.
  // Per configuration its own copy: the QDQ convolutions become integer ones where that
  // configuration's backend computes them (core/fuse_qdq.cpp), float ones elsewhere.
  std::vector<std::unique_ptr<Graph>> int8_timed;
  std::vector<bool> is_int8(configs.size(), false);
  if (int8) {
    for (const auto& config : configs) {
      int8_timed.push_back(std::make_unique<Graph>(*int8));
      BenchReport scratch;  // the float graph's fusion notes already say what fuses
      FuseOptions fo;
      fo.integer = fuse_options_for(config.second, reg, false).integer;
      fo.oracle = &reg;
      if (o.fuse) fuse_for_bench(*int8_timed.back(), fo, scratch);
    }
    add_int8_twins(int8_timed, configs, graph_of, precision_of, is_int8);
  }
  // Build every plan before timing anything: bad placements fail fast, with no partial output.
  std::vector<std::unique_ptr<Plan>> plans;
  for (size_t i = 0; i < configs.size(); ++i) {
    const Placement& placement = configs[i].second;
    PlanOptions po;
    po.deterministic = o.deterministic;
    po.precision = precision_of[i];
    auto plan = Plan::build(*graph_of[i], placement, reg, po);
    if (!plan.ok()) return explain_unsupported(plan.status(), g);
    plans.push_back(std::move(plan.value()));
  }
  if (o.peaks) add_device_peaks(o, plans, report);
  std::vector<Tensor> reference, reference8;
  if (o.check) {
    std::unique_ptr<Plan> naive_plan;
    Plan* ref = nullptr;
    for (size_t i = 0; i < configs.size() && !o.fuse; ++i)
      if (configs[i].first == "naive") ref = plans[i].get();
    if (!ref) {
      MOSAIC_ASSIGN_OR_RETURN(naive_plan, Plan::build(g, Placement::all_on("naive", {}), reg));
      ref = naive_plan.get();
    }
    say(o, "computing the naive reference output...");
    NodeProgress ref_progress("naive reference", ref->steps().size());
    MOSAIC_RETURN_IF_ERROR(ref->run(inputs, &reference, o.verbose ? &ref_progress : nullptr));
    if (int8) {  // the int8 twins' own reference: naive on the QDQ model as loaded
      say(o, "computing the naive reference output of the int8 model...");
      MOSAIC_ASSIGN_OR_RETURN(auto naive8, Plan::build(*int8, Placement::all_on("naive", {}), reg));
      MOSAIC_RETURN_IF_ERROR(naive8->run(inputs, &reference8));
    }
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    Plan& plan = *plans[i];
    say(o, "benchmarking " + configs[i].first + "...");
    const BenchConfig cfg = timed_config(o, configs[i].first);
    ConfigReport check;
    if (is_int8[i]) check.precision = "int8";
    if (o.check) {
      std::vector<Tensor> outs;
      MOSAIC_RETURN_IF_ERROR(plan.run(inputs, &outs));
      // A quantised model's outputs are judged as an int8 twin's, whatever computes them: a
      // float sum on a rounding edge moves a code by one step, and that step carries on.
      const bool int8_rule = is_int8[i] || quantised_model;
      check_outputs(o, g, outs, is_int8[i] ? reference8 : reference, reference, precision_of[i], int8_rule, check);
      if (!check.check_ok) check.first_divergent_node = first_divergent(*graph_of[i], reg, configs[i].second, inputs, o);
      out.checks_ok = out.checks_ok && check.check_ok;
    }
    plan.tracker().reset_peak();
    if (trace) trace->begin_config(configs[i].first, plan);
    MOSAIC_ASSIGN_OR_RETURN(BenchResult r, run_benchmark(plan, inputs, cfg, trace));
    add_config(report, configs[i].first, plan, r, check);
    if (config_done(o, report, r)) break;
  }
  if (report.interrupted) return Status::ok();  // no side-by-side round after a stop
  if (auto_assign)  // the auto plan against the fastest single backend, in alternating rounds
    MOSAIC_RETURN_IF_ERROR(auto_side_by_side(o, configs, plans, inference_timing, report));
  return Status::ok();
}

/// The sgemm and memory peaks the report's percentages are of (measured once, cached).
MachinePeaks machine_peaks(const BenchOptions& o, const Provenance& p) {
  MachinePeaks peaks = cpu_peaks(p, o.refresh_peaks, [&o](const std::string& line) { say(o, line); });
  // bf16 plans are divided by the bfloat16 matmul's own peak, never the float32 one (which a
  // machine with bf16 units exceeds: "183% of sgemm peak"). Measured per run that needs it.
  if (o.precision == "bf16" || o.precision == "both") {
    say(o, "measuring the machine's bfloat16 matmul peak...");
    peaks.bf16_gemm_gflops = probe_bf16_gemm_gflops();
  }
  return peaks;
}

/// o.fallback without "none" (which only forbids falling back).
std::vector<std::string> fallback_backends(const BenchOptions& o) {
  std::vector<std::string> fallback;
  for (const auto& b : o.fallback)
    if (b != "none") fallback.push_back(b);
  return fallback;
}

}  // namespace

Expected<BenchConfigs> bench_configs(const BenchOptions& o) {
  const auto& reg = builtin_registry();
  for (const auto& b : o.backends) {
    if (!reg.has_backend(b)) return unknown_backend(b, "all");
    if (const std::string why = reg.unavailable(b); !why.empty())
      return Status::unsupported("backend '" + b + "' is unavailable here: " + why);
  }
  for (const auto& b : o.fallback)
    if (b != "none" && !reg.has_backend(b)) return unknown_backend(b, "none", "`fallback` backend");
  const std::vector<std::string> fallback = fallback_backends(o);
  BenchConfigs configs;
  if (o.assign == "auto") return configs;  // chosen once the graph is loaded and fused
  if (!o.assign.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(Placement p, assign_placement(o.assign, fallback));
    configs.emplace_back("mixed", p);
    return configs;
  }
  for (const auto& b : o.backends) configs.emplace_back(b, Placement::all_on(b, fallback));
  return configs;
}

Status check_bench_options(const BenchOptions& o) {
  // The ranges the CLI and Python check too (api/option_rules.hpp); 0 leaves the batch the
  // model's and turns the adaptive mode off.
  std::vector<std::pair<std::string, double>> numbers = {
      {"threads", o.common.threads},          {"warmup", o.config.warmup},
      {"iterations", o.config.iterations},    {"repeats", o.config.repeats},
      {"max_seconds", o.config.max_seconds},  {"min_seconds", o.config.min_seconds},
      {"max_iterations", o.config.max_iterations}, {"auto_budget", o.auto_budget},
      {"processes", o.processes},             {"rtol", o.rtol},
      {"atol", o.atol},                       {"lr", o.lr},
      {"bucket_mb", o.bucket_mb}};
  if (o.common.batch != 0) numbers.push_back({"batch", static_cast<double>(o.common.batch)});
  if (o.config.target_ci != 0) numbers.push_back({"target_ci", o.config.target_ci});
  MOSAIC_RETURN_IF_ERROR(check_numbers("bench", numbers));
  if (o.mode != "inference" && o.mode != "training")
    return Status::invalid("`mode` must be inference or training, got '" + o.mode + "'");
  if (!o.data.empty() && !o.common.inputs.empty())
    return Status::invalid("`data` and `inputs` both give the model's inputs: use one");
  if (!o.distributed.empty()) {
    if (o.distributed != "allreduce" && o.distributed != "allreduce-blocking")
      return Status::invalid("`distributed` takes allreduce or allreduce-blocking in bench, got '" + o.distributed +
                             "' (train runs the other modes)");
    if (o.mode != "training") return Status::invalid("`distributed` needs `mode` training");
    if (o.config.target_ci > 0 || o.config.min_seconds > 0 || o.find_max_batch || o.processes > 1)
      return Status::invalid("`distributed` runs fixed iteration counts on every rank: it excludes "
                             "`target_ci`, `min_seconds`, `find_max_batch` and `processes`");
  }
  if (o.precision != "f32" && o.precision != "bf16" && o.precision != "tf32" && o.precision != "fp16" &&
      o.precision != "both" && o.precision != "int8")
    return Status::invalid("`precision` must be f32, bf16, tf32, fp16, both or int8, got '" + o.precision + "'");
  if (o.precision == "int8" && o.mode != "inference")
    return Status::invalid("`precision` int8 times inference (a QDQ model does not train)");
  if (o.precision == "fp16" && o.mode != "inference")
    return Status::invalid("`precision` fp16 times inference: float16 gradients underflow without loss scaling, "
                           "which Mosaic's training does not do (bf16 trains)");
  if (o.precision != "f32" && o.assign == "auto")
    return Status::unsupported("`precision` " + o.precision + " with `assign` auto: the automatic placement chooses "
                               "in float32; time `precision` " + o.precision + " on explicit placements");
  if (o.attention != "fused" && o.attention != "unfused" && o.attention != "both")
    return Status::invalid("`attention` must be fused, unfused or both, got '" + o.attention + "'");
  return check_auto_options(o);
}

/// --precision int8: the model calibrated on the bench's data (its training split) or on
/// random inputs, in its QDQ form (api/quantize.hpp), prepared as the float one.
Expected<std::unique_ptr<Graph>> int8_model(const BenchOptions& o, BenchReport& report) {
  QuantizeOptions qo;
  qo.model = o.model;
  qo.data = o.data;
  qo.common = o.common;
  if (!o.data.empty()) {
    qo.common.batch = 0;  // calibration's own batch (64) over 512 training rows
    qo.common.inputs.clear();
  } else {
    qo.samples = 4 * std::max<int64_t>(1, o.common.batch);  // four batches of the bench's inputs
  }
  say(o, "calibrating the int8 model...");
  QuantizeReport qr;
  MOSAIC_ASSIGN_OR_RETURN(Graph q, quantized_graph(qo, &qr));
  MOSAIC_ASSIGN_OR_RETURN(Graph prepared, prepare_model(std::move(q), o.common, nullptr));
  report.notes.push_back("int8: each configuration beside its twin on the QDQ model (" + std::to_string(qr.nodes.size()) +
                         " node(s) quantised, weights per channel, uint8 activations; " + qr.method + " calibration on " +
                         qr.calibration + "; `mosaic quantize` writes it); the twins are checked against naive on "
                         "that model, their top-1 agreement and SQNR against float32's");
  return std::make_unique<Graph>(std::move(prepared));
}

Expected<BenchOutcome> bench(const BenchOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_bench_options(o));
  if (o.find_max_batch) return Status::invalid("api::bench times plans; find_max_batch is api::find_max_batch (api/max_batch.hpp)");
  const bool training = o.mode == "training";
  // Everything that can be refused is refused before minutes of timing.
  if (training) {
    OptimizerConfig probe;
    probe.lr = o.lr;
    if (auto opt = make_optimizer(o.optimizer, probe); !opt.ok()) return opt.status().with_context("`optimizer`");
  }
  MOSAIC_ASSIGN_OR_RETURN(BenchConfigs configs, bench_configs(o));
  const std::vector<std::string> fallback = fallback_backends(o);
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  PrepareReport pr;
  MOSAIC_ASSIGN_OR_RETURN(Graph g, load_prepared(o.model, o.common, &pr));
  for (const auto& [label, placement] : configs) MOSAIC_RETURN_IF_ERROR(placement.check_names(g));
  // What every backend shares, the check against naive cannot see: the shapes are compared
  // with ONNX's own inference first (docs/conformance.md).
  if (o.model.rfind("zoo:", 0) != 0) {
    MOSAIC_ASSIGN_OR_RETURN(ShapeCheck sc, check_shapes_against_onnx(o.model, g));
    pr.notes.push_back("shapes: " + std::to_string(sc.compared) + " values agree with ONNX's own shape inference" +
                       (sc.skipped ? " (" + std::to_string(sc.skipped) + " it leaves unknown)" : ""));
  }
  std::vector<Tensor> inputs;
  Tensor data_labels;
  std::string input_description = "random uniform [0, 1) (seed " + std::to_string(o.common.seed) + ")";
  if (o.data.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(inputs, model_inputs(g, o.common, &input_description));
  } else {
    MOSAIC_ASSIGN_OR_RETURN(RealBatch batch, real_batch(g, o.data, o.common.seed));
    inputs = std::move(batch.inputs);
    data_labels = batch.labels;
    input_description = batch.description;
    if (training && !data_labels.defined())
      pr.notes.push_back("labels: random (the data's classes do not match the model's logits)");
  }

  BenchOutcome out;
  BenchReport& report = out.report;
  out.checked = training ? "loss and gradients" : "outputs";
  report.model = o.model;
  report.input = input_description;
  report.batch = g.inputs.empty() ? 1 : g.value_descs.at(g.inputs[0].name).shape.at(0);
  if (!g.inputs.empty()) {  // token ids [batch, T]: throughput in sequences/s and tokens/s
    const TensorDesc& in = g.value_descs.at(g.inputs[0].name);
    if (in.dtype == DType::kI64 && in.shape.size() == 2) report.sequence = in.shape[1];
  }
  report.mode = o.mode;
  report.threads = omp_get_max_threads();
  report.config = o.config;
  report.seed = o.common.seed;
  report.notes = pr.notes;
  report.provenance = run_provenance(o.model, {{"input", std::to_string(o.common.seed)}});
  report.kernels = report.provenance.kernels;
  if (o.peaks) report.peaks = machine_peaks(o, report.provenance);
  if (!o.trace.empty()) out.trace = std::make_unique<TraceRecorder>();

  if (!training) {
    std::unique_ptr<Graph> int8;
    if (o.precision == "int8") {
      MOSAIC_ASSIGN_OR_RETURN(int8, int8_model(o, report));
    }
    MOSAIC_RETURN_IF_ERROR(run_inference_bench(o, configs, fallback, g, int8.get(), inputs, out));
    finish_report(report);
    return out;
  }
  std::unique_ptr<dist::DataParallel> group;
  if (!o.distributed.empty()) {
    dist::DataParallelOptions dpo;
    dpo.mode = o.distributed;
    dpo.bucket_mb = o.bucket_mb;
    dpo.collective = o.collective;
    std::string settings = o.model + "|" + std::to_string(o.common.batch) + "|" + o.optimizer + "|" +
                           std::to_string(o.lr) + "|" + std::to_string(o.config.iterations) + "|" +
                           std::to_string(o.config.warmup) + "|" + std::to_string(o.config.repeats) + "|" +
                           std::to_string(o.common.seed);
    for (const auto& c : configs) settings += "|" + c.first;
    MOSAIC_ASSIGN_OR_RETURN(group, dist::DataParallel::start(dpo, settings));
    report.notes.push_back("data-parallel " + o.distributed + ": " + std::to_string(group->size()) + " ranks x batch " +
                           std::to_string(o.common.batch) + "; per-node figures are rank 0's");
  }
  const Status st = run_training_bench(o, configs, fallback, g, inputs, data_labels, out, group.get());
  // A rank that failed must not leave the others in a collective.
  if (!st.is_ok() && group && group->size() > 1) group->abort("bench failed: " + st.message());
  MOSAIC_RETURN_IF_ERROR(st);
  if (out.reporting_rank) finish_report(report);
  return out;
}

}  // namespace mosaic::api
