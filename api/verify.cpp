#include "api/verify.hpp"

#include "core/inputs.hpp"
#include "api/option_rules.hpp"

#include <regex.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <set>

#include "api/util.hpp"
#include "backends/registry.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "ir/elements.hpp"
#include "metrics/benchmark.hpp"
#include "metrics/compare.hpp"

namespace mosaic::api {
namespace {

namespace fs = std::filesystem;

struct CaseResult {
  CaseVerdict verdict = CaseVerdict::kPassed;
  std::string detail;
};

CaseResult classify(const Status& st) {
  return {st.code() == StatusCode::kUnsupported ? CaseVerdict::kUnsupported : CaseVerdict::kFailed, st.message()};
}

/// A test-data tensor as the model declares it: onnx releases before 1.14 wrote bfloat16
/// test data as uint16 (the same bits), which is read as bfloat16; any other type that
/// differs from the declaration fails the case, naming both.
/// onnx 1.12's uint16 test data read as the bfloat16 it stands for (the same bits).
bool bfloat16_as_uint16(const Tensor& t, DType wanted) { return t.dtype() == DType::kU16 && wanted == DType::kBF16; }
Tensor as_bfloat16(const Tensor& t) { return Tensor::on_buffer({DType::kBF16, t.shape()}, t.buffer()); }

Expected<Tensor> as_declared(const Tensor& t, DType declared, const char* what, size_t i) {
  if (t.dtype() == declared) return t;
  if (bfloat16_as_uint16(t, declared)) return as_bfloat16(t);
  return Status::invalid(std::string(what) + " " + std::to_string(i) + " of the data set is " + dtype_name(t.dtype()) +
                         ", the model declares " + dtype_name(declared));
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


/// One output against its expected value at o.rtol and o.atol, or within `step` (one
/// quantisation step, 0 for none) where that is wider; the worst error and the widest step
/// allowed accumulate. False with the reason in `failure`.
bool compare_output(const Tensor& got, const Tensor& expected, double step, const VerifyOptions& o, double* worst,
                    double* widest_step, std::string* failure) {
  // A step, and the float32 rounding of a difference of exactly one step.
  const double allowed = step * (1 + 1.0 / (1 << 20));
  const Agreement a = compare_tensors(got, expected, o.rtol, std::max(o.atol, allowed));
  if (allowed > o.atol) *widest_step = std::max(*widest_step, step);
  *worst = std::max(*worst, a.max_abs);
  if (a.ok) return true;
  *failure = a.message;
  if (allowed > o.atol) {
    char b[64];
    std::snprintf(b, sizeof b, "; one quantisation step (%.3g) allowed", step);
    *failure += b;
  }
  return false;
}

CaseResult run_case(const fs::path& dir, const std::string& backend, const VerifyOptions& o) {
  auto g = load_onnx((dir / "model.onnx").string());
  if (!g.ok()) return classify(g.status());
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {CaseVerdict::kFailed, "no test_data_set_* directory"};
  CaseResult result;
  double worst = 0, widest_step = 0;
  std::vector<double> steps;  // per output (quantisation_steps)
  int fell_back = 0, run_time_nodes = 0;
  std::string constants_note;
  std::vector<Tensor> runtime_inputs;
  for (const auto& set : sets) {
    std::vector<Tensor> inputs, expected;
    for (const auto& f : sorted_files(set, "input_")) {
      auto t = load_tensor_pb(f);
      if (!t.ok()) return classify(t.status());
      inputs.push_back(t.value());
    }
    if (inputs.size() != g.value().inputs.size())
      return {CaseVerdict::kFailed, "model has " + std::to_string(g.value().inputs.size()) + " inputs, data set has " +
                                    std::to_string(inputs.size())};
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto t = as_declared(inputs[i], g.value().inputs[i].dtype, "input", i);
      if (!t.ok()) return classify(t.status());
      inputs[i] = t.value();
    }
    // The data set fixes the input shapes. Integer inputs stay run-time inputs (token ids,
    // Gather's indices) unless the graph needs their values to infer shapes (Reshape's
    // shape, Slice's starts, ...): then they are bound as load-time constants, and the
    // nodes that depend on them fold away; so are float inputs that a node reads as a shape
    // (Resize's scales and roi).
    Graph graph;
    bool bound = false, bound_float = false;
    // Attempt 0 as given; 1 with the shape-like inputs bound (where there are any); the last
    // also plans output shapes that depend on input values (NonZero, ...) from this set's
    // inputs, which binding cannot make static.
    // An input read as a shape, axes or position (bound as a constant from attempt 1 on).
    auto shape_like = [&](size_t i) {
      return dtype_is_integer(inputs[i].dtype()) || !unguessable_reader(g.value(), g.value().inputs[i].name).empty();
    };
    for (int attempt = 0; attempt < 3; ++attempt) {
      graph = g.value();
      PrepareOptions po;
      runtime_inputs.clear();
      for (size_t i = 0; i < inputs.size(); ++i) {
        graph.inputs[i].dims = inputs[i].shape();
        graph.inputs[i].has_shape = true;
        const bool bind = bound && shape_like(i);
        if (bind) po.constant_inputs[graph.inputs[i].name] = inputs[i];
        else runtime_inputs.push_back(inputs[i]);
        bound_float = bound_float || (bind && dtype_is_float(inputs[i].dtype()));
      }
      if (attempt == 2)
        po.specialise = [&runtime_inputs](const Graph&) -> Expected<std::vector<Tensor>> { return runtime_inputs; };
      auto pr = prepare_graph(graph, builtin_registry(), po);
      if (pr.ok()) {
        run_time_nodes = static_cast<int>(pr.value().run_time_shapes.size());
        break;
      }
      if (attempt == 2) return classify(pr.status());
      if (attempt == 0) {
        for (size_t i = 0; i < inputs.size() && !bound; ++i) bound = shape_like(i);
        if (!bound) attempt = 1;  // nothing to bind: on to planning from the values
      }
    }
    if (bound) constants_note = bound_float ? "; int64 and shape inputs bound as constants" : "; int64 inputs bound as constants";
    std::vector<std::string> fallback;
    if (!o.fallback.empty() && o.fallback != backend) fallback.push_back(o.fallback);
    const Placement placement = Placement::all_on(backend, fallback);
    if (o.quantisation_step) steps = quantisation_steps(graph);
    if (o.fuse) fuse_graph(graph, fuse_options_for(placement, builtin_registry(), false));
    for (const auto& f : sorted_files(set, "output_")) {
      auto t = load_tensor_pb(f);
      if (!t.ok()) return classify(t.status());
      expected.push_back(t.value());
    }
    inputs = runtime_inputs;
    auto plan = Plan::build(graph, placement, builtin_registry());
    if (!plan.ok()) return classify(plan.status());
    fell_back = std::max(fell_back, plan.value()->fallback_count());
    std::vector<Tensor> outs;
    Status st = plan.value()->run(inputs, &outs);
    if (!st.is_ok()) return classify(st);
    if (outs.size() != expected.size())
      return {CaseVerdict::kFailed, "produced " + std::to_string(outs.size()) + " outputs, expected " +
                                    std::to_string(expected.size())};
    for (size_t k = 0; k < outs.size(); ++k) {
      if (bfloat16_as_uint16(expected[k], outs[k].dtype())) expected[k] = as_bfloat16(expected[k]);
      std::string failure;
      const double step = k < steps.size() ? steps[k] : 0.0;
      if (!compare_output(outs[k], expected[k], step, o, &worst, &widest_step, &failure))
        return {CaseVerdict::kFailed, set.filename().string() + " output " + std::to_string(k) + ": " + failure};
    }
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "max abs err %.3g", worst);
  result.detail = buf + constants_note;
  if (widest_step > 0) {
    std::snprintf(buf, sizeof buf, "%.3g", widest_step);
    result.detail += std::string("; quantised outputs compared within one quantisation step (") + buf + ")";
  }
  if (run_time_nodes > 0 && backend != "naive")
    result.detail += "; " + std::to_string(run_time_nodes) + " nodes on naive (output shapes from input values)";
  if (fell_back > run_time_nodes && !o.fallback.empty())
    result.detail += "; " + std::to_string(fell_back - (backend != "naive" ? run_time_nodes : 0)) + " nodes on " +
                     o.fallback + " (--fallback)";
  return result;
}

}  // namespace

std::vector<double> quantisation_steps(const Graph& graph) {
  static const std::set<std::string> quantising = {
      "QuantizeLinear", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear", "com.microsoft.QuantizeLinear",
      "com.microsoft.QLinearAdd", "com.microsoft.QLinearMul", "com.microsoft.QLinearSigmoid",
      "com.microsoft.QLinearLeakyRelu", "com.microsoft.QLinearSoftmax", "com.microsoft.QLinearGlobalAveragePool",
      "com.microsoft.QLinearAveragePool", "com.microsoft.QLinearConcat", "com.microsoft.QGemm"};
  std::vector<double> steps(graph.outputs.size(), 0.0);
  for (size_t k = 0; k < graph.outputs.size(); ++k)
    for (const Node& n : graph.nodes) {
      if (n.outputs.empty() || n.outputs[0] != graph.outputs[k].name) continue;
      const std::string key = n.op_key();
      if ((key == "DequantizeLinear" || key == "com.microsoft.DequantizeLinear") && n.inputs.size() > 1) {
        auto it = graph.initializers.find(n.inputs[1]);
        if (it != graph.initializers.end() && dtype_is_float(it->second.dtype()))
          for (int64_t i = 0; i < it->second.numel(); ++i)
            steps[k] = std::max(steps[k], std::fabs(load_f64(it->second.dtype(), it->second.data(), i)));
      } else if (quantising.count(key) && dtype_is_integer(graph.outputs[k].dtype)) {
        steps[k] = 1.0;
      }
    }
  return steps;
}

const char* case_verdict_name(CaseVerdict v) {
  switch (v) {
    case CaseVerdict::kPassed: return "PASSED";
    case CaseVerdict::kFailed: return "FAILED";
    case CaseVerdict::kUnsupported: return "UNSUPPORTED";
  }
  return "?";
}

Expected<std::vector<std::string>> verify_backends(const std::string& backend) {
  if (backend == "all") return builtin_registry().available_backends();
  if (builtin_registry().has_backend(backend)) return std::vector<std::string>{backend};
  return unknown_backend(backend, "all");
}

Expected<VerifyReport> verify(const VerifyOptions& o, const std::function<void(const VerifyCase&)>& on_case) {
  if (o.per_node || o.determinism)
    return Status::invalid("`per_node` and `determinism` are audits of one model: verify_per_node and verify_determinism "
                           "(api/verify_audits.hpp) run them");
  MOSAIC_RETURN_IF_ERROR(check_numbers("verify", {{"rtol", o.rtol}, {"atol", o.atol}, {"threads", o.common.threads}}));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  if (!o.common.inputs.empty())
    return Status::invalid("`inputs` is for --per-node and --determinism, which make up inputs; a suite's cases "
                           "bring their own");
  VerifyReport report;
  MOSAIC_ASSIGN_OR_RETURN(report.backends, verify_backends(o.backend));
  if (!o.fallback.empty() && !builtin_registry().has_backend(o.fallback))
    return unknown_backend(o.fallback).with_context("`fallback`");
  // POSIX extended regular expression.
  regex_t filter;
  if (regcomp(&filter, o.filter.empty() ? "." : o.filter.c_str(), REG_EXTENDED | REG_NOSUB) != 0)
    return Status::invalid("`filter` '" + o.filter + "' is not a valid regular expression");
  struct Free {
    regex_t* r;
    ~Free() { regfree(r); }
  } free_filter{&filter};
  std::vector<fs::path> cases;
  for (const auto& p : o.paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) return Status::not_found(p + ": not a directory (expected a test case or suite)");
    if (fs::exists(fs::path(p) / "model.onnx")) {
      cases.push_back(p);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) found.push_back(e.path());
    if (found.empty()) return Status::not_found(p + ": contains no model.onnx nor test case directories");
    std::sort(found.begin(), found.end());
    cases.insert(cases.end(), found.begin(), found.end());
  }
  for (const auto& c : cases) {
    const std::string name = c.filename().string();
    if (regexec(&filter, name.c_str(), 0, nullptr, 0) != 0) continue;
    for (const auto& b : report.backends) {
      const int64_t t0 = now_ns();
      CaseResult r;
      try {
        r = run_case(c, b, o);
      } catch (const std::bad_alloc& e) {
        // One case too large for the machine (an allocation of 3.35 GB) is that case's
        // verdict, named; the rest of the suite still runs.
        const std::string what = e.what();
        r.verdict = CaseVerdict::kFailed;
        r.detail = what.rfind("out of memory", 0) == 0 ? what : "out of memory (" + what + ")";
      }
      VerifyCase v{name, b, r.verdict, r.detail, static_cast<double>(now_ns() - t0) / 1e9};
      (r.verdict == CaseVerdict::kPassed ? report.passed : r.verdict == CaseVerdict::kFailed ? report.failed : report.unsupported)++;
      if (on_case) on_case(v);
      report.cases.push_back(std::move(v));
    }
  }
  if (report.cases.empty())
    return Status::not_found("`filter` '" + o.filter + "' matches none of the " + std::to_string(cases.size()) +
                             " cases: nothing was verified");
  return report;
}

}  // namespace mosaic::api
