// mosaic.bench, verify, gradcheck, train, optcheck: the library API's functions with keyword
// arguments (options.hpp tables), returning the reports the CLI writes as JSON, as plain
// Python objects.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <iostream>

#include "api/mosaic.hpp"
#include "api/html_report.hpp"
#include "api/sweep.hpp"
#include "metrics/run_compare.hpp"
#include "bridge.hpp"
#include "ir/interrupt.hpp"
#include "metrics/report.hpp"
#include "options.hpp"
#include "api/optcheck.hpp"
#include "api/generate.hpp"
#include "api/loadgen.hpp"
#include "api/quantize.hpp"

namespace mosaic::python {

namespace {

using api::BenchOptions;
using api::GradcheckRunOptions;
using api::TrainOptions;
using api::VerifyOptions;

const std::vector<Field<BenchOptions>>& bench_fields() {
  static const std::vector<Field<BenchOptions>> f = {
      list_field<BenchOptions>("backends", [](BenchOptions& o) -> auto& { return o.backends; }),
      str_field<BenchOptions>("assign", [](BenchOptions& o) -> auto& { return o.assign; }),
      list_field<BenchOptions>("fallback", [](BenchOptions& o) -> auto& { return o.fallback; }),
      str_field<BenchOptions>("mode", [](BenchOptions& o) -> auto& { return o.mode; }),
      str_field<BenchOptions>("optimizer", [](BenchOptions& o) -> auto& { return o.optimizer; }),
      float_field<BenchOptions>("lr", [](BenchOptions& o) -> auto& { return o.lr; }),
      int_field<BenchOptions>("batch", [](BenchOptions& o) -> auto& { return o.common.batch; }),
      list_field<BenchOptions>("shapes", [](BenchOptions& o) -> auto& { return o.common.shapes; }),
      list_field<BenchOptions>("inputs", [](BenchOptions& o) -> auto& { return o.common.inputs; }),
      int_field<BenchOptions>("threads", [](BenchOptions& o) -> auto& { return o.common.threads; }),
      int_field<BenchOptions>("seed", [](BenchOptions& o) -> auto& { return o.common.seed; }),
      int_field<BenchOptions>("warmup", [](BenchOptions& o) -> auto& { return o.config.warmup; }),
      int_field<BenchOptions>("iterations", [](BenchOptions& o) -> auto& { return o.config.iterations; }),
      int_field<BenchOptions>("repeats", [](BenchOptions& o) -> auto& { return o.config.repeats; }),
      float_field<BenchOptions>("max_seconds", [](BenchOptions& o) -> auto& { return o.config.max_seconds; }),
      float_field<BenchOptions>("min_seconds", [](BenchOptions& o) -> auto& { return o.config.min_seconds; }),
      float_field<BenchOptions>("target_ci", [](BenchOptions& o) -> auto& { return o.config.target_ci; }),
      int_field<BenchOptions>("max_iterations", [](BenchOptions& o) -> auto& { return o.config.max_iterations; }),
      str_field<BenchOptions>("data", [](BenchOptions& o) -> auto& { return o.data; }),
      str_field<BenchOptions>("trace", [](BenchOptions& o) -> auto& { return o.trace; }),
      bool_field<BenchOptions>("peaks", [](BenchOptions& o) -> auto& { return o.peaks; }),
      bool_field<BenchOptions>("check", [](BenchOptions& o) -> auto& { return o.check; }),
      bool_field<BenchOptions>("fuse", [](BenchOptions& o) -> auto& { return o.fuse; }),
      str_field<BenchOptions>("attention", [](BenchOptions& o) -> auto& { return o.attention; }),
      bool_field<BenchOptions>("deterministic", [](BenchOptions& o) -> auto& { return o.deterministic; }),
      str_field<BenchOptions>("precision", [](BenchOptions& o) -> auto& { return o.precision; }),
      float_field<BenchOptions>("rtol", [](BenchOptions& o) -> auto& { return o.rtol; }),
      float_field<BenchOptions>("atol", [](BenchOptions& o) -> auto& { return o.atol; }),
      bool_field<BenchOptions>("remeasure", [](BenchOptions& o) -> auto& { return o.remeasure; }),
      float_field<BenchOptions>("auto_budget", [](BenchOptions& o) -> auto& { return o.auto_budget; }),
      bool_field<BenchOptions>("progress", [](BenchOptions& o) -> auto& { return o.verbose; }),
      int_field<BenchOptions>("processes", [](BenchOptions& o) -> auto& { return o.processes; }),
      bool_field<BenchOptions>("find_max_batch", [](BenchOptions& o) -> auto& { return o.find_max_batch; }),
      str_field<BenchOptions>("memory_limit", [](BenchOptions& o) -> auto& { return o.memory_limit; }),
  };
  return f;
}

/// verify_per_node's and verify_determinism's options: one model and its made-up inputs.
const std::vector<Field<VerifyOptions>>& audit_fields() {
  static const std::vector<Field<VerifyOptions>> f = {
      str_field<VerifyOptions>("backend", [](VerifyOptions& o) -> auto& { return o.backend; }),
      float_field<VerifyOptions>("rtol", [](VerifyOptions& o) -> auto& { return o.rtol; }),
      float_field<VerifyOptions>("atol", [](VerifyOptions& o) -> auto& { return o.atol; }),
      int_field<VerifyOptions>("batch", [](VerifyOptions& o) -> auto& { return o.common.batch; }),
      list_field<VerifyOptions>("shapes", [](VerifyOptions& o) -> auto& { return o.common.shapes; }),
      list_field<VerifyOptions>("inputs", [](VerifyOptions& o) -> auto& { return o.common.inputs; }),
      int_field<VerifyOptions>("seed", [](VerifyOptions& o) -> auto& { return o.common.seed; }),
      int_field<VerifyOptions>("threads", [](VerifyOptions& o) -> auto& { return o.common.threads; }),
      bool_field<VerifyOptions>("deterministic", [](VerifyOptions& o) -> auto& { return o.deterministic; }),
  };
  return f;
}

const std::vector<Field<VerifyOptions>>& verify_fields() {
  static const std::vector<Field<VerifyOptions>> f = {
      str_field<VerifyOptions>("backend", [](VerifyOptions& o) -> auto& { return o.backend; }),
      str_field<VerifyOptions>("filter", [](VerifyOptions& o) -> auto& { return o.filter; }),
      float_field<VerifyOptions>("rtol", [](VerifyOptions& o) -> auto& { return o.rtol; }),
      float_field<VerifyOptions>("atol", [](VerifyOptions& o) -> auto& { return o.atol; }),
      bool_field<VerifyOptions>("fuse", [](VerifyOptions& o) -> auto& { return o.fuse; }),
      bool_field<VerifyOptions>("quantisation_step", [](VerifyOptions& o) -> auto& { return o.quantisation_step; }),
      str_field<VerifyOptions>("fallback", [](VerifyOptions& o) -> auto& { return o.fallback; }),
      int_field<VerifyOptions>("threads", [](VerifyOptions& o) -> auto& { return o.common.threads; }),
  };
  return f;
}

using api::QuantizeOptions;
const std::vector<Field<QuantizeOptions>>& quantize_fields() {
  static const std::vector<Field<QuantizeOptions>> f = {
      str_field<QuantizeOptions>("output", [](QuantizeOptions& o) -> auto& { return o.output; }),
      str_field<QuantizeOptions>("data", [](QuantizeOptions& o) -> auto& { return o.data; }),
      str_field<QuantizeOptions>("normalize", [](QuantizeOptions& o) -> auto& { return o.normalize; }),
      str_field<QuantizeOptions>("method", [](QuantizeOptions& o) -> auto& { return o.method; }),
      float_field<QuantizeOptions>("percentile", [](QuantizeOptions& o) -> auto& { return o.percentile; }),
      int_field<QuantizeOptions>("samples", [](QuantizeOptions& o) -> auto& { return o.samples; }),
      bool_field<QuantizeOptions>("per_channel", [](QuantizeOptions& o) -> auto& { return o.per_channel; }),
      str_field<QuantizeOptions>("activation_type", [](QuantizeOptions& o) -> auto& { return o.activation_type; }),
      bool_field<QuantizeOptions>("symmetric_activations", [](QuantizeOptions& o) -> auto& { return o.symmetric_activations; }),
      bool_field<QuantizeOptions>("reduce_range", [](QuantizeOptions& o) -> auto& { return o.reduce_range; }),
      list_field<QuantizeOptions>("op_types", [](QuantizeOptions& o) -> auto& { return o.op_types; }),
      list_field<QuantizeOptions>("exclude", [](QuantizeOptions& o) -> auto& { return o.exclude; }),
      bool_field<QuantizeOptions>("evaluate", [](QuantizeOptions& o) -> auto& { return o.evaluate; }),
      int_field<QuantizeOptions>("eval_samples", [](QuantizeOptions& o) -> auto& { return o.eval_samples; }),
      float_field<QuantizeOptions>("sqnr_threshold", [](QuantizeOptions& o) -> auto& { return o.sqnr_threshold; }),
      str_field<QuantizeOptions>("backend", [](QuantizeOptions& o) -> auto& { return o.backend; }),
      int_field<QuantizeOptions>("batch", [](QuantizeOptions& o) -> auto& { return o.common.batch; }),
      list_field<QuantizeOptions>("shapes", [](QuantizeOptions& o) -> auto& { return o.common.shapes; }),
      list_field<QuantizeOptions>("inputs", [](QuantizeOptions& o) -> auto& { return o.common.inputs; }),
      int_field<QuantizeOptions>("seed", [](QuantizeOptions& o) -> auto& { return o.common.seed; }),
      int_field<QuantizeOptions>("threads", [](QuantizeOptions& o) -> auto& { return o.common.threads; }),
  };
  return f;
}

using api::GenerateOptions;
const std::vector<Field<GenerateOptions>>& generate_fields() {
  using O = GenerateOptions;
  static const std::vector<Field<O>> f = {
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      int_field<O>("prompt_tokens", [](O& o) -> auto& { return o.prompt_tokens; }),
      int_list_field<O>("prompt_ids", [](O& o) -> auto& { return o.prompt_ids; }),
      int_field<O>("new_tokens", [](O& o) -> auto& { return o.new_tokens; }),
      float_field<O>("temperature", [](O& o) -> auto& { return o.temperature; }),
      int_field<O>("top_k", [](O& o) -> auto& { return o.top_k; }),
      int_field<O>("runs", [](O& o) -> auto& { return o.runs; }),
      int_field<O>("processes", [](O& o) -> auto& { return o.processes; }),
      int_list_field<O>("contexts", [](O& o) -> auto& { return o.contexts; }),
      bool_field<O>("per_node", [](O& o) -> auto& { return o.per_node; }),
      bool_field<O>("fuse", [](O& o) -> auto& { return o.fuse; }),
      str_field<O>("precision", [](O& o) -> auto& { return o.precision; }),
      bool_field<O>("peaks", [](O& o) -> auto& { return o.peaks; }),
      int_field<O>("batch", [](O& o) -> auto& { return o.common.batch; }),
      list_field<O>("shapes", [](O& o) -> auto& { return o.common.shapes; }),
      int_field<O>("seed", [](O& o) -> auto& { return o.common.seed; }),
      int_field<O>("threads", [](O& o) -> auto& { return o.common.threads; }),
  };
  return f;
}

using api::LoadgenOptions;
const std::vector<Field<LoadgenOptions>>& loadgen_fields() {
  using O = LoadgenOptions;
  static const std::vector<Field<O>> f = {
      str_field<O>("scenario", [](O& o) -> auto& { return o.scenario; }),
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      float_field<O>("rate", [](O& o) -> auto& { return o.rate; }),
      float_field<O>("latency_bound", [](O& o) -> auto& { return o.latency_bound; }),
      bool_field<O>("find_rate", [](O& o) -> auto& { return o.find_rate; }),
      int_field<O>("search_steps", [](O& o) -> auto& { return o.search_steps; }),
      int_field<O>("workers", [](O& o) -> auto& { return o.workers; }),
      int_field<O>("min_queries", [](O& o) -> auto& { return o.min_queries; }),
      float_field<O>("min_duration", [](O& o) -> auto& { return o.min_duration; }),
      bool_field<O>("fuse", [](O& o) -> auto& { return o.fuse; }),
      bool_field<O>("generate", [](O& o) -> auto& { return o.generate.enabled; }),
      str_field<O>("prompt_tokens", [](O& o) -> auto& { return o.generate.prompt_tokens; }),
      str_field<O>("new_tokens", [](O& o) -> auto& { return o.generate.new_tokens; }),
      float_field<O>("ttft_bound", [](O& o) -> auto& { return o.generate.ttft_bound; }),
      float_field<O>("goodput_target", [](O& o) -> auto& { return o.generate.goodput_target; }),
      float_field<O>("tpot_bound", [](O& o) -> auto& { return o.generate.tpot_bound; }),
      int_field<O>("batch", [](O& o) -> auto& { return o.common.batch; }),
      list_field<O>("shapes", [](O& o) -> auto& { return o.common.shapes; }),
      list_field<O>("inputs", [](O& o) -> auto& { return o.common.inputs; }),
      int_field<O>("seed", [](O& o) -> auto& { return o.common.seed; }),
      int_field<O>("threads", [](O& o) -> auto& { return o.common.threads; }),
  };
  return f;
}

const std::vector<Field<GradcheckRunOptions>>& gradcheck_fields() {
  using O = GradcheckRunOptions;
  static const std::vector<Field<O>> f = {
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      str_field<O>("assign", [](O& o) -> auto& { return o.assign; }),
      list_field<O>("fallback", [](O& o) -> auto& { return o.fallback; }),
      str_field<O>("plant", [](O& o) -> auto& { return o.plant; }),
      int_field<O>("batch", [](O& o) -> auto& { return o.batch; }),
      int_field<O>("threads", [](O& o) -> auto& { return o.threads; }),
      float_field<O>("tolerance", [](O& o) -> auto& { return o.check.tolerance; }),
      float_field<O>("eps", [](O& o) -> auto& { return o.check.eps; }),
      int_field<O>("directions", [](O& o) -> auto& { return o.check.directions; }),
      int_field<O>("elements", [](O& o) -> auto& { return o.check.elements; }),
      int_field<O>("seed", [](O& o) -> auto& { return o.check.seed; }),
      bool_field<O>("check_input", [](O& o) -> auto& { return o.check.check_input; }),
      bool_field<O>("progress", [](O& o) -> auto& { return o.verbose; }),
  };
  return f;
}

const std::vector<Field<TrainOptions>>& train_fields() {
  using O = TrainOptions;
  static const std::vector<Field<O>> f = {
      str_field<O>("data", [](O& o) -> auto& { return o.data; }),
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      str_field<O>("assign", [](O& o) -> auto& { return o.assign; }),
      str_field<O>("optimizer", [](O& o) -> auto& { return o.optimizer; }),
      float_field<O>("lr", [](O& o) -> auto& { return o.opt.lr; }),
      float_field<O>("momentum", [](O& o) -> auto& { return o.opt.momentum; }),
      float_field<O>("weight_decay", [](O& o) -> auto& { return o.opt.weight_decay; }),
      float_field<O>("beta1", [](O& o) -> auto& { return o.opt.beta1; }),
      float_field<O>("beta2", [](O& o) -> auto& { return o.opt.beta2; }),
      float_field<O>("eps", [](O& o) -> auto& { return o.opt.eps; }),
      str_field<O>("lr_schedule", [](O& o) -> auto& { return o.lr_schedule; }),
      str_field<O>("loss", [](O& o) -> auto& { return o.loss; }),
      str_field<O>("objective", [](O& o) -> auto& { return o.objective; }),
      int_field<O>("batch", [](O& o) -> auto& { return o.batch; }),
      int_field<O>("epochs", [](O& o) -> auto& { return o.epochs; }),
      int_field<O>("steps", [](O& o) -> auto& { return o.steps; }),
      int_field<O>("steps_per_epoch", [](O& o) -> auto& { return o.steps_per_epoch; }),
      int_field<O>("eval_batch", [](O& o) -> auto& { return o.eval_batch; }),
      bool_field<O>("shuffle", [](O& o) -> auto& { return o.shuffle; }),
      bool_field<O>("evaluate", [](O& o) -> auto& { return o.evaluate; }),
      bool_field<O>("deterministic", [](O& o) -> auto& { return o.deterministic; }),
      str_field<O>("precision", [](O& o) -> auto& { return o.precision; }),
      str_field<O>("normalize", [](O& o) -> auto& { return o.normalize; }),
      list_field<O>("freeze", [](O& o) -> auto& { return o.freeze; }),
      int_field<O>("seed", [](O& o) -> auto& { return o.seed; }),
      int_field<O>("threads", [](O& o) -> auto& { return o.threads; }),
      str_field<O>("save", [](O& o) -> auto& { return o.save; }),
      str_field<O>("checkpoint", [](O& o) -> auto& { return o.checkpoint; }),
      str_field<O>("resume", [](O& o) -> auto& { return o.resume; }),
      str_field<O>("trace", [](O& o) -> auto& { return o.trace; }),
  };
  return f;
}

const std::vector<Field<OptcheckOptions>>& optcheck_fields() {
  using O = OptcheckOptions;
  static const std::vector<Field<O>> f = {
      str_field<O>("reference", [](O& o) -> auto& { return o.reference; }),
      str_field<O>("model", [](O& o) -> auto& { return o.model; }),
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      str_field<O>("data", [](O& o) -> auto& { return o.data; }),
      str_field<O>("onnx_data", [](O& o) -> auto& { return o.onnx_data; }),
      int_field<O>("steps", [](O& o) -> auto& { return o.steps; }),
      float_field<O>("tolerance", [](O& o) -> auto& { return o.tolerance; }),
      int_field<O>("seed", [](O& o) -> auto& { return o.seed; }),
      int_field<O>("threads", [](O& o) -> auto& { return o.threads; }),
      float_field<O>("lr", [](O& o) -> auto& { return o.config.lr; }),
      float_field<O>("momentum", [](O& o) -> auto& { return o.config.momentum; }),
      float_field<O>("weight_decay", [](O& o) -> auto& { return o.config.weight_decay; }),
      float_field<O>("beta1", [](O& o) -> auto& { return o.config.beta1; }),
      float_field<O>("beta2", [](O& o) -> auto& { return o.config.beta2; }),
      float_field<O>("eps", [](O& o) -> auto& { return o.config.eps; }),
  };
  return f;
}

const std::vector<Field<api::PlanQuery>>& plan_fields() {
  using O = api::PlanQuery;
  static const std::vector<Field<O>> f = {
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      str_field<O>("assign", [](O& o) -> auto& { return o.assign; }),
      list_field<O>("fallback", [](O& o) -> auto& { return o.fallback; }),
      str_field<O>("mode", [](O& o) -> auto& { return o.mode; }),
      bool_field<O>("fuse", [](O& o) -> auto& { return o.fuse; }),
      int_field<O>("batch", [](O& o) -> auto& { return o.common.batch; }),
      list_field<O>("shapes", [](O& o) -> auto& { return o.common.shapes; }),
      list_field<O>("inputs", [](O& o) -> auto& { return o.common.inputs; }),
  };
  return f;
}

const std::vector<Field<api::SimulateQuery>>& simulate_fields() {
  using O = api::SimulateQuery;
  static const std::vector<Field<O>> f = {
      str_field<O>("backend", [](O& o) -> auto& { return o.backend; }),
      int_field<O>("batch", [](O& o) -> auto& { return o.batch; }),
      int_field<O>("threads", [](O& o) -> auto& { return o.threads; }),
      int_field<O>("iterations", [](O& o) -> auto& { return o.iterations; }),
      int_field<O>("warmup", [](O& o) -> auto& { return o.warmup; }),
      int_field<O>("profile_concurrency", [](O& o) -> auto& { return o.profile_concurrency; }),
      str_field<O>("network", [](O& o) -> auto& { return o.network; }),
      str_field<O>("intra", [](O& o) -> auto& { return o.intra; }),
      int_list_field<O>("ranks", [](O& o) -> auto& { return o.ranks; }),
      int_field<O>("ranks_per_node", [](O& o) -> auto& { return o.ranks_per_node; }),
      list_field<O>("groups", [](O& o) -> auto& { return o.groups; }),
      int_field<O>("cores_per_node", [](O& o) -> auto& { return o.cores_per_node; }),
      list_field<O>("modes", [](O& o) -> auto& { return o.modes; }),
      str_field<O>("collective", [](O& o) -> auto& { return o.collective; }),
      int_field<O>("servers", [](O& o) -> auto& { return o.servers; }),
      int_field<O>("sync_every", [](O& o) -> auto& { return o.sync_every; }),
      float_field<O>("bucket_mb", [](O& o) -> auto& { return o.bucket_mb; }),
      int_field<O>("predict_batch", [](O& o) -> auto& { return o.predict_batch; }),
      float_field<O>("compute_scale", [](O& o) -> auto& { return o.compute_scale; }),
      float_field<O>("target_images_per_s", [](O& o) -> auto& { return o.target_images_per_s; }),
  };
  return f;
}

/// Removes `progress` (the call's, not the options struct's) from `kw`: whether to draw it.
bool take_progress(py::dict& kw, const std::string& function) {
  if (!kw.contains("progress")) return false;
  const py::object v = kw["progress"];
  PyDict_DelItemString(kw.ptr(), "progress");
  return !v.is_none() && as_bool(v, function + "(): argument 'progress'");
}

/// `hyperparameters`: {name: float} for a user optimizer's own keys (config.extra).
void set_extra(OptimizerConfig& c, const py::object& extra, const std::string& function) {
  if (extra.is_none()) return;
  if (!py::isinstance<py::dict>(extra))
    throw py::type_error(function + "(): argument 'hyperparameters' must be a dict of str to float");
  for (auto kv : py::reinterpret_borrow<py::dict>(extra))
    c.extra[as_str(kv.first, function + "(): a key of 'hyperparameters'")] =
        as_float(kv.second, function + "(): hyperparameters['" + std::string(py::str(kv.first)) + "']");
}

template <class T>
T value_or_raise(Expected<T> r) {
  if (!r.ok()) raise_status(r.status());
  return std::move(r).value();
}

py::object run_bench(const std::string& model, const py::kwargs& kw) {
  BenchOptions o;
  o.model = model;
  o.backends = builtin_registry().available_backends();
  o.db.off = true;
  apply("bench", bench_fields(), kw, o);
  if (o.backends.empty() && o.assign.empty()) raise_status(Status::invalid("bench(): backends is empty"));
  if (!o.assign.empty() && !kw.contains("backends")) o.backends.clear();
  Status loaded = api::load_bundled_backends(o.assign.empty() ? o.backends : std::vector<std::string>{"all"});
  if (!loaded.is_ok()) raise_status(loaded);
  if (o.find_max_batch) {  // times nothing
    Expected<nlohmann::json> found = Status::internal("not run");
    call_released([&] { found = api::find_max_batch(o); });
    return to_python(value_or_raise(std::move(found)));
  }
  if (o.processes > 1) {  // children of the mosaic program, pooled
    Expected<api::ProcessesOutcome> pooled = Status::internal("not run");
    call_released([&] { pooled = api::bench_processes(o, o.verbose ? &std::cerr : nullptr); });
    api::ProcessesOutcome r = value_or_raise(std::move(pooled));
    r.pooled["checks_ok"] = r.checks_ok;
    r.pooled["checked"] = o.mode == "training" ? "loss and gradients" : "outputs";
    return to_python(r.pooled);
  }
  Expected<api::BenchOutcome> out = Status::internal("not run");
  call_released([&] { out = api::bench(o); });
  api::BenchOutcome r = value_or_raise(std::move(out));
  if (!o.trace.empty() && r.trace)
    if (Status st = r.trace->write(o.trace); !st.is_ok()) raise_status(st);
  nlohmann::json j = bench_json(r.report);
  j["checks_ok"] = r.checks_ok;
  j["checked"] = r.checked;
  return to_python(j);
}

py::object run_verify(const py::object& paths, const py::kwargs& kw) {
  VerifyOptions o;
  o.paths = as_list(paths, "verify(): argument 'paths'");
  apply("verify", verify_fields(), kw, o);
  Status loaded = api::load_bundled_backends({o.backend});
  if (!loaded.is_ok()) raise_status(loaded);
  Expected<api::VerifyReport> out = Status::internal("not run");
  call_released([&] { out = api::verify(o); });
  api::VerifyReport r = value_or_raise(std::move(out));
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases)
    cases.push_back({{"name", c.name}, {"backend", c.backend}, {"verdict", api::case_verdict_name(c.verdict)},
                     {"detail", c.detail}, {"seconds", c.seconds}});
  return to_python({{"backends", r.backends}, {"cases", cases}, {"passed", r.passed}, {"failed", r.failed},
                    {"unsupported", r.unsupported}});
}

nlohmann::json per_node_json(const PerNodeReport& r) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : r.nodes)
    nodes.push_back({{"node", n.node}, {"op", n.op}, {"backend", n.backend}, {"ran", n.ran}, {"ok", n.ok},
                     {"max_abs", n.max_abs}, {"max_rel", n.max_rel}, {"rel_l2", n.rel_l2}, {"note", n.note},
                     {"kinks", n.note_kinks}});
  nlohmann::json j = {{"nodes", nodes}, {"first_divergent", nullptr}};
  if (r.first_divergent >= 0) j["first_divergent"] = r.nodes[static_cast<size_t>(r.first_divergent)].node;
  return j;
}

py::object run_verify_per_node(const std::string& model, const py::kwargs& kw) {
  VerifyOptions o;
  o.paths = {model};
  o.per_node = true;
  apply("verify_per_node", audit_fields(), kw, o);
  Status loaded = api::load_bundled_backends({o.backend});
  if (!loaded.is_ok()) raise_status(loaded);
  Expected<api::PerNodeVerifyReport> out = Status::internal("not run");
  call_released([&] { out = api::verify_per_node(o); });
  api::PerNodeVerifyReport r = value_or_raise(std::move(out));
  nlohmann::json audits = nlohmann::json::array();
  for (const auto& a : r.audits) {
    nlohmann::json j = {{"backend", a.backend}, {"forward", per_node_json(a.forward)}, {"backward", nullptr}};
    if (a.has_backward) j["backward"] = per_node_json(a.backward);
    if (!a.backward_skipped.empty()) j["backward_skipped"] = a.backward_skipped;
    audits.push_back(j);
  }
  return to_python({{"model", r.model}, {"backends", audits}, {"ran", r.ran}, {"agree", r.agree}});
}

py::object run_quantize(const std::string& model, const py::kwargs& kw) {
  QuantizeOptions o;
  o.model = model;
  apply("quantize", quantize_fields(), kw, o);
  Expected<api::QuantizeReport> out = Status::internal("not run");
  call_released([&] { out = api::quantize_model(o); });
  return to_python(api::quantize_report_json(value_or_raise(std::move(out))));
}

py::object run_generate(const std::string& model, const py::kwargs& kw) {
  GenerateOptions o;
  o.model = model;
  apply("generate", generate_fields(), kw, o);
  Expected<api::GenerateReport> out = Status::internal("not run");
  call_released([&] { out = api::generate(o); });
  return to_python(api::generate_report_json(value_or_raise(std::move(out))));
}

py::object run_loadgen(const std::string& model, const py::kwargs& kw) {
  LoadgenOptions o;
  o.model = model;
  apply("loadgen", loadgen_fields(), kw, o);
  Expected<api::LoadgenReport> out = Status::internal("not run");
  call_released([&] { out = api::loadgen(o); });
  return to_python(api::loadgen_report_json(value_or_raise(std::move(out))));
}

py::object run_verify_determinism(const std::string& model, const py::kwargs& kw) {
  VerifyOptions o;
  o.paths = {model};
  o.determinism = true;
  apply("verify_determinism", audit_fields(), kw, o);
  Status loaded = api::load_bundled_backends({o.backend});
  if (!loaded.is_ok()) raise_status(loaded);
  Expected<api::DeterminismVerifyReport> out = Status::internal("not run");
  call_released([&] { out = api::verify_determinism(o); });
  api::DeterminismVerifyReport r = value_or_raise(std::move(out));
  auto rows = [](const std::vector<DeterminismRow>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& row : v)
      a.push_back({{"what", row.what}, {"repeat_max_ulp", row.repeat_max_ulp}, {"threads_max_ulp", row.threads_max_ulp}});
    return a;
  };
  nlohmann::json audits = nlohmann::json::array();
  for (const auto& d : r.audits)
    audits.push_back({{"backend", d.backend}, {"nodes", rows(d.nodes)}, {"gradients", rows(d.gradients)}});
  return to_python({{"model", r.model}, {"backends", audits}, {"threads", r.threads}, {"repeats", r.repeats}});
}

py::object run_gradcheck(const std::string& model, const py::kwargs& kw) {
  GradcheckRunOptions o;
  o.model = model;
  apply("gradcheck", gradcheck_fields(), kw, o);
  Status loaded = api::load_bundled_backends({o.assign.empty() ? o.backend : "all"});
  if (!loaded.is_ok()) raise_status(loaded);
  Expected<api::GradcheckOutcome> out = Status::internal("not run");
  call_released([&] { out = api::gradcheck(o); });
  api::GradcheckOutcome r = value_or_raise(std::move(out));
  nlohmann::json j = api::gradcheck_json(o, r);
  j["exit_code"] = r.exit_code();
  return to_python(j);
}

py::object run_train(const std::string& model, const py::object& hyper, const py::kwargs& kw) {
  TrainOptions o;
  o.model = model;
  o.db.off = true;
  py::dict rest(kw);
  const bool progress = take_progress(rest, "train");
  apply("train", train_fields(), rest, o);
  set_extra(o.opt, hyper, "train");
  Status loaded = api::load_bundled_backends({o.assign.empty() ? o.backend : "all"});
  if (!loaded.is_ok()) raise_status(loaded);
  Expected<api::TrainResult> out = Status::internal("not run");
  call_released([&] { out = api::train_model(o, nullptr, progress); });
  api::TrainResult r = value_or_raise(std::move(out));
  nlohmann::json j = r.log;
  j["diverged"] = r.diverged;
  j["fallbacks"] = r.fallbacks;
  return to_python(j);
}

py::object run_optcheck(const std::string& optimizer, const py::object& hyper, const py::kwargs& kw) {
  OptcheckOptions o;
  o.optimizer = optimizer;
  apply("optcheck", optcheck_fields(), kw, o);
  o.lr_given = kw.contains("lr") && !kw["lr"].is_none();
  if (o.model == "none") o.model.clear();  // as the CLI's --model none: no network check
  set_extra(o.config, hyper, "optcheck");
  Expected<api::OptcheckReport> out = Status::internal("not run");
  call_released([&] { out = api::optcheck(o); });
  api::OptcheckReport r = value_or_raise(std::move(out));
  nlohmann::json j = r.doc;
  j["exit_code"] = r.exit_code();
  return to_python(j);
}

py::object run_info(const std::string& model, const py::kwargs& kw) {
  static const std::vector<Field<api::InfoQuery>> fields = {
      int_field<api::InfoQuery>("batch", [](api::InfoQuery& o) -> auto& { return o.common.batch; }),
      list_field<api::InfoQuery>("shapes", [](api::InfoQuery& o) -> auto& { return o.common.shapes; }),
      list_field<api::InfoQuery>("inputs", [](api::InfoQuery& o) -> auto& { return o.common.inputs; }),
  };
  api::InfoQuery q;
  q.model = model;
  apply("info", fields, kw, q);
  Expected<api::InfoReport> out = Status::internal("not run");
  call_released([&] { out = api::info(q); });
  return to_python(api::info_json(value_or_raise(std::move(out))));
}

py::object run_history(const py::kwargs& kw) {
  static const std::vector<Field<api::HistoryQuery>> fields = {
      str_field<api::HistoryQuery>("db", [](api::HistoryQuery& o) -> auto& { return o.db; }),
      str_field<api::HistoryQuery>("kind", [](api::HistoryQuery& o) -> auto& { return o.kind; }),
      str_field<api::HistoryQuery>("model", [](api::HistoryQuery& o) -> auto& { return o.model; }),
      int_field<api::HistoryQuery>("limit", [](api::HistoryQuery& o) -> auto& { return o.limit; }),
  };
  api::HistoryQuery q;
  apply("history", fields, kw, q);
  api::HistoryReport r = value_or_raise(api::history(q));
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& run : r.runs) runs.push_back(api::stored_run_json(run));
  return to_python(runs);
}

py::object run_document(int64_t id, const py::object& db) {
  return to_python(value_or_raise(api::run_document(db.is_none() ? "" : as_str(db, "run_document(): argument 'db'"), id)));
}

/// A run for compare: a bench or generate report (dict, as mosaic.bench returns), a run id, or a name
/// ("last", "last~1", a JSON file).
nlohmann::json from_python(py::handle v) {
  return nlohmann::json::parse(py::module_::import("json").attr("dumps")(v).cast<std::string>());
}

py::object run_compare(const py::object& a, const py::object& b, const py::kwargs& kw) {
  static const std::vector<Field<api::CompareQuery>> fields = {
      str_field<api::CompareQuery>("db", [](api::CompareQuery& o) -> auto& { return o.db; }),
      float_field<api::CompareQuery>("alpha", [](api::CompareQuery& o) -> auto& { return o.stats.alpha; }),
      float_field<api::CompareQuery>("threshold", [](api::CompareQuery& o) -> auto& { return o.stats.threshold; }),
      bool_field<api::CompareQuery>("force", [](api::CompareQuery& o) -> auto& { return o.stats.force; }),
  };
  api::CompareQuery q;
  apply("compare", fields, kw, q);
  auto name = [](const py::object& v, const char* arg) {
    if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v)) return std::to_string(v.cast<int64_t>());
    return as_str(v, std::string("compare(): argument '") + arg + "'");
  };
  Expected<api::CompareOutcome> out = Status::internal("not run");
  if (py::isinstance<py::dict>(a) || py::isinstance<py::dict>(b)) {
    if (!py::isinstance<py::dict>(a) || !py::isinstance<py::dict>(b))
      throw py::type_error("compare(): give two reports (dicts) or two run names, not one of each");
    out = api::compare_documents(from_python(a), from_python(b), q.stats);
  } else {
    q.a = name(a, "a");
    q.b = name(b, "b");
    out = api::compare(q);
  }
  api::CompareOutcome r = value_or_raise(std::move(out));
  nlohmann::json j = comparison_json(r.comparison, q.stats, r.a_name, r.b_name);
  j["slower"] = r.comparison.slower();
  return to_python(j);
}

py::object run_plan(const std::string& model, const py::kwargs& kw) {
  api::PlanQuery q;
  q.model = model;
  apply("plan", plan_fields(), kw, q);
  Status loaded = api::load_bundled_backends({q.assign.empty() ? q.backend : "all"});
  if (!loaded.is_ok()) raise_status(loaded);
  Expected<api::PlanReport> out = Status::internal("not run");
  call_released([&] { out = api::plan(q); });
  return to_python(api::plan_json(value_or_raise(std::move(out))));
}

py::object run_simulate(const py::object& input, const py::kwargs& kw) {
  api::SimulateQuery q;
  py::dict rest(kw);
  if (take_progress(rest, "simulate")) q.progress = &std::cerr;
  apply("simulate", simulate_fields(), rest, q);
  if (py::isinstance<py::dict>(input)) q.profile = from_python(input);
  else q.input = as_str(input, "simulate(): argument 'input'");
  Expected<nlohmann::json> out = Status::internal("not run");
  call_released([&] { out = api::simulate(q); });
  return to_python(value_or_raise(std::move(out)));
}

py::object run_sweep(const py::object& config, const py::kwargs& kw) {
  static const std::vector<Field<api::SweepQuery>> fields = {
      int_field<api::SweepQuery>("max_cells", [](api::SweepQuery& o) -> auto& { return o.max_cells; }),
      int_field<api::SweepQuery>("max_grid", [](api::SweepQuery& o) -> auto& { return o.max_grid; }),
  };
  api::SweepQuery q;
  py::dict rest(kw);
  if (take_progress(rest, "sweep")) q.progress = &std::cerr;
  apply("sweep", fields, rest, q);
  q.config = as_str(config, "sweep(): argument 'config'");
  Expected<api::SweepOutcome> out = Status::internal("not run");
  call_released([&] { out = api::sweep(q); });
  api::SweepOutcome r = value_or_raise(std::move(out));
  nlohmann::json j = r.doc;
  j["ran"] = r.ran;
  j["cached"] = r.cached;
  j["errors"] = r.errors;
  j["stopped"] = r.stopped;
  j["output"] = r.output;
  return to_python(j);
}

py::object run_report(const py::args& runs, const py::kwargs& kw) {
  static const std::vector<Field<api::ReportQuery>> fields = {
      str_field<api::ReportQuery>("output", [](api::ReportQuery& o) -> auto& { return o.output; }),
      str_field<api::ReportQuery>("title", [](api::ReportQuery& o) -> auto& { return o.title; }),
      str_field<api::ReportQuery>("db", [](api::ReportQuery& o) -> auto& { return o.db; }),
  };
  api::ReportQuery q;
  apply("report", fields, kw, q);
  size_t i = 0;
  for (py::handle run : runs) {
    const std::string where = "report(): run " + std::to_string(++i);
    if (py::isinstance<py::dict>(run)) q.documents.push_back(from_python(run));
    else if (py::isinstance<py::int_>(run) && !py::isinstance<py::bool_>(run)) q.inputs.push_back(std::to_string(run.cast<int64_t>()));
    else q.inputs.push_back(as_str(run, where));
  }
  Expected<api::ReportOutcome> out = Status::internal("not run");
  call_released([&] { out = api::html_report(q); });
  api::ReportOutcome r = value_or_raise(std::move(out));
  return to_python({{"output", r.output}, {"figures", r.figures}, {"runs", r.runs}, {"notes", r.notes}});
}

py::object run_export(const std::string& name, const py::object& output, int64_t seed) {
  if (seed < 0) throw py::value_error("export(): argument 'seed' is out of range: " + std::to_string(seed));
  const std::string path = as_str(output, "export(): argument 'output'");
  const std::string model = name.rfind("zoo:", 0) == 0 ? name.substr(4) : name;
  Expected<std::string> out = Status::internal("not run");
  call_released([&] { out = api::export_model(model, path, static_cast<uint64_t>(seed)); });
  return py::str(value_or_raise(std::move(out)));
}

template <class O>
std::string doc(const char* head, const std::vector<Field<O>>& fields) {
  return std::string(head) + "\n\nKeyword arguments (None keeps the default):\n" + describe(fields);
}

}  // namespace

void bind_commands(py::module_& m) {
  m.def("bench", &run_bench, py::arg("model"),
        doc("bench(model, **options) -> dict: compare backends on one model (the mosaic.bench/2 report).",
            bench_fields())
            .c_str());
  m.def("verify", &run_verify, py::arg("paths"),
        doc("verify(paths, **options) -> dict: ONNX test cases against their expected outputs.", verify_fields()).c_str());
  m.def("verify_per_node", &run_verify_per_node, py::arg("model"),
        doc("verify_per_node(model, **options) -> dict: each node alone on each backend against naive (forward, and "
            "the backward of a training step where the model ends in [N, classes] logits); `agree` is the verdict.",
            audit_fields())
            .c_str());
  m.def("verify_determinism", &run_verify_determinism, py::arg("model"),
        doc("verify_determinism(model, **options) -> dict: one training step repeated on fresh plans and at 1 thread, "
            "the ULP drift per node output and gradient; `repeats` is whether every repeat was bitwise identical.",
            audit_fields())
            .c_str());
  m.def("quantize", &run_quantize, py::arg("model"),
        doc("quantize(model, **options) -> dict: calibrates the model, writes its int8 QDQ form to `output` (if "
            "given) and measures it beside the float model: test accuracy, top-1 agreement, SQNR per node "
            "(mosaic.quantize/1).",
            quantize_fields())
            .c_str());
  m.def("generate", &run_generate, py::arg("model"),
        doc("generate(model, **options) -> dict: a causal language model continues a prompt token by token; the "
            "generated ids, every token's time, TTFT, TPOT, inter-token latency and tokens/s (mosaic.generate/1).",
            generate_fields())
            .c_str());
  m.def("loadgen", &run_loadgen, py::arg("model"),
        doc("loadgen(model, **options) -> dict: MLPerf LoadGen's scenarios (scenario='single-stream', "
            "'multi-stream', 'server' or 'offline'): every query's issue time and latency, percentiles with "
            "LoadGen's early-stopping estimate, samples/s, the server's highest rate under a p99 bound "
            "(mosaic.loadgen/1).",
            loadgen_fields())
            .c_str());
  m.def("gradcheck", &run_gradcheck, py::arg("model"),
        doc("gradcheck(model, **options) -> dict: analytic gradients against finite differences (mosaic.gradcheck/1).",
            gradcheck_fields())
            .c_str());
  m.def("info", &run_info, py::arg("model"),
        "info(model, batch=None, shapes=None, inputs=None) -> dict: inputs, outputs, parameters, FLOPs, memory, and per node "
        "which backends take it (mosaic.info/1).");
  m.def("history", &run_history,
        "history(db=None, kind=None, model=None, limit=20) -> list of dict: the runs in the results store, newest "
        "first.");
  m.def("run_document", &run_document, py::arg("id"), py::arg("db") = py::none(),
        "run_document(id, db=None) -> dict: the document a stored run recorded.");
  m.def("compare", &run_compare, py::arg("a"), py::arg("b"),
        "compare(a, b, db=None, alpha=0.05, threshold=0.05, force=False) -> dict: two bench runs or two generate "
        "runs (reports from mosaic.bench or mosaic.generate, run ids, 'last', 'last~1' or JSON files) compared per "
        "configuration and node, or per decode step and first token (mosaic.compare/1, plus 'slower').");
  m.def("plan", &run_plan, py::arg("model"),
        doc("plan(model, **options) -> dict: the placement, fallbacks and conversions a plan would have (mosaic.plan/1).",
            plan_fields())
            .c_str());
  m.def("simulate", &run_simulate, py::arg("input"),
        doc("simulate(input, progress=False, **options) -> dict: predicted data-parallel throughput and speed-up "
            "(mosaic.simulate/1). input: a model to profile now (a file or zoo:NAME, in child mosaic processes), a "
            "`bench --mode training` JSON file, or mosaic.bench(..., mode='training')'s result.",
            simulate_fields())
            .c_str());
  m.def("sweep", &run_sweep, py::arg("config"),
        "sweep(config, max_cells=0, max_grid=1000, progress=False) -> dict: runs the grid of training cells a sweep "
        "YAML file describes, resuming from the cells its output folder already holds, and writes the tables there; "
        "returns mosaic.sweep/1 plus ran, cached, errors, stopped and output.");
  m.def("report", &run_report,
        "report(*runs, output='report.html', title=None, db=None) -> dict: one self-contained HTML page with "
        "matplotlib figures from bench, train, sweep and generate runs: reports as mosaic.bench/train/sweep/generate "
        "returned them, JSON "
        "files, sweep output folders, run ids or 'last'. Returns {output, figures, runs, notes}.");
  m.def("export", &run_export, py::arg("model"), py::arg("output"), py::arg("seed") = 0,
        "export(model, output, seed=0) -> str: writes a built-in model (\"alexnet-cifar\" or \"zoo:alexnet-cifar\") "
        "as an ONNX file with weights drawn from seed; returns its description.");
  m.def("_train", &run_train, py::arg("model"), py::arg("hyperparameters") = py::none(),
        doc("train(model, hyperparameters=None, **options) -> dict: the training log.", train_fields()).c_str());
  m.def("_optcheck", &run_optcheck, py::arg("optimizer"), py::arg("hyperparameters") = py::none(),
        doc("optcheck(optimizer, hyperparameters=None, **options) -> dict: verdicts on an optimizer.", optcheck_fields())
            .c_str());
}

}  // namespace mosaic::python
