#include "api/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "api/option_rules.hpp"
#include "core/fuse.hpp"
#include "api/train_support.hpp"
#include "backends/registry.hpp"
#include "core/plan.hpp"
#include "core/qdq.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "metrics/calibration.hpp"
#include "metrics/compare.hpp"

namespace mosaic::api {
namespace {

/// The batches a model is calibrated on: rows of a data set's split, or random inputs.
struct Batches {
  std::string description;
  int64_t count = 0;
  std::function<Expected<std::vector<Tensor>>(int64_t k)> make;
};

/// What calibration leaves for the evaluation.
struct Calibrated {
  Graph qdq;       ///< the QDQ model as loaded
  Graph prepared;  ///< the float model, prepared at the batch
  std::shared_ptr<DataSplits> data;  ///< null without --data
  Normalization norm;
  Batches batches;
  CommonOptions common;  ///< with the batch bound
};

Status check_options(const QuantizeOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_numbers("quantize", {{"samples", static_cast<double>(o.samples)},
                                                    {"eval_samples", static_cast<double>(o.eval_samples)},
                                                    {"percentile", o.percentile},
                                                    {"sqnr_threshold", o.sqnr_threshold},
                                                    {"threads", o.common.threads}}));
  if (o.common.batch != 0) MOSAIC_RETURN_IF_ERROR(check_numbers("quantize", {{"batch", static_cast<double>(o.common.batch)}}));
  if (o.activation_type != "uint8" && o.activation_type != "int8")
    return Status::invalid("`activation_type` '" + o.activation_type + "': expected uint8 or int8");
  MOSAIC_RETURN_IF_ERROR(parse_calibration_method(o.method).status().with_context("`method`"));
  if (!o.output.empty()) MOSAIC_RETURN_IF_ERROR(check_output_path(o.output, "`output`"));
  if (o.backend == "cuda") return Status::invalid("`backend`: quantize calibrates on a CPU backend, not cuda");
  return Status::ok();
}

QdqOptions qdq_options(const QuantizeOptions& o) {
  QdqOptions q;
  q.op_types = o.op_types;
  q.exclude = o.exclude;
  q.per_channel = o.per_channel;
  q.activation_type = o.activation_type == "int8" ? DType::kI8 : DType::kU8;
  q.symmetric_activations = o.symmetric_activations;
  q.reduce_range = o.reduce_range;
  return q;
}

/// `g` (prepared) returning `names` too, after its own outputs.
Graph with_outputs(Graph g, const std::vector<std::string>& names) {
  std::set<std::string> have;
  for (const auto& v : g.outputs) have.insert(v.name);
  for (const auto& name : names) {
    if (!have.insert(name).second) continue;
    const TensorDesc& d = g.value_descs.at(name);
    ValueInfo v;
    v.name = name;
    v.dtype = d.dtype;
    v.dims = d.shape;
    v.has_shape = true;
    g.outputs.push_back(std::move(v));
  }
  return g;
}

Expected<std::unique_ptr<Plan>> plan_on(const Graph& g, const std::string& backend) {
  return Plan::build(g, Placement::all_on(backend), builtin_registry(), PlanOptions{});
}

/// Rows [start, start + batch) of d's images (zeros past its end), normalised.
Tensor image_batch(const Dataset& d, const TensorDesc& desc, int64_t start, const Normalization& norm) {
  Tensor x = Tensor::empty(desc);
  std::memset(x.data(), 0, x.bytes());
  const int64_t batch = x.dim(0), m = std::max<int64_t>(0, std::min(batch, d.size() - start));
  const size_t row = x.bytes() / static_cast<size_t>(batch);
  std::memcpy(x.data(), static_cast<const char*>(d.images.data()) + start * row, m * row);
  if (norm.enabled()) norm.apply(x.f32(), m, x.dim(1), x.numel() / batch / x.dim(1));
  return x;
}

/// The model's calibration batches: with data, full batches of its training split's first
/// rows; else random inputs, a seed per batch.
Expected<Batches> calibration_batches(const QuantizeOptions& o, const Graph& g, const CommonOptions& c,
                                      const std::shared_ptr<DataSplits>& data, const Normalization& norm) {
  Batches b;
  const TensorDesc& in = g.value_descs.at(g.inputs[0].name);
  const int64_t batch = in.shape.empty() ? 1 : in.shape[0];
  if (data) {
    b.count = std::min(o.samples, data->train.size()) / batch;
    b.description = std::to_string(b.count * batch) + " images of " + o.data + "'s training split";
    b.make = [data, in, batch, norm](int64_t k) -> Expected<std::vector<Tensor>> {
      return std::vector<Tensor>{image_batch(data->train, in, k * batch, norm)};
    };
    return b;
  }
  b.count = std::max<int64_t>(1, (o.samples + batch - 1) / batch);
  b.description = std::to_string(b.count) + " batch(es) of random inputs (seeds " + std::to_string(c.seed) + " on)";
  b.make = [g, c](int64_t k) {
    CommonOptions ck = c;
    ck.seed = c.seed + static_cast<uint64_t>(k);
    return model_inputs(g, ck);
  };
  return b;
}

/// The calibrated ranges of `targets` over the batches.
Expected<std::map<std::string, std::pair<float, float>>> calibrate(const QuantizeOptions& o, const Graph& prepared,
                                                                   const QdqTargets& targets, const Batches& batches) {
  const CalibrationMethod method = parse_calibration_method(o.method).value();
  std::map<std::string, std::pair<float, float>> ranges;
  std::vector<std::string> run;  // computed at run time; the rest folded to constants at load
  for (const auto& a : targets.activations) {
    if (auto it = prepared.initializers.find(a); it != prepared.initializers.end()) {
      RangeCollector c;
      c.observe_extent(it->second.f32(), it->second.numel());
      auto r = c.range(CalibrationMethod::kMinMax, 100);
      if (!r.ok()) return r.status().with_context("quantize: constant '" + a + "'");
      ranges[a] = r.value();
    } else if (prepared.value_descs.count(a)) {
      run.push_back(a);
    } else {
      return Status::invalid("quantize: value '" + a + "' is not in the prepared model");
    }
  }
  if (run.empty()) return ranges;
  const Graph g = with_outputs(prepared, run);
  const size_t first = prepared.outputs.size();
  MOSAIC_ASSIGN_OR_RETURN(auto plan, plan_on(g, o.backend));
  std::vector<RangeCollector> collectors(run.size());
  for (int pass = 0; pass < (method == CalibrationMethod::kMinMax ? 1 : 2); ++pass)
    for (int64_t k = 0; k < batches.count; ++k) {
      MOSAIC_ASSIGN_OR_RETURN(std::vector<Tensor> inputs, batches.make(k));
      MOSAIC_RETURN_IF_ERROR(plan->run(inputs, nullptr));
      for (size_t i = 0; i < run.size(); ++i) {
        const Tensor& t = plan->output(first + i);
        if (pass == 0) collectors[i].observe_extent(t.f32(), t.numel());
        else collectors[i].observe_histogram(method, t.f32(), t.numel());
      }
    }
  for (size_t i = 0; i < run.size(); ++i) {
    auto r = collectors[i].range(method, o.percentile);
    if (!r.ok()) return r.status().with_context("quantize: tensor '" + run[i] + "'");
    ranges[run[i]] = r.value();
  }
  return ranges;
}

Expected<Calibrated> calibrate_model(const QuantizeOptions& o, QuantizeReport* r) {
  MOSAIC_RETURN_IF_ERROR(check_options(o));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  Calibrated cal;
  cal.common = o.common;
  if (!o.data.empty()) {
    MOSAIC_ASSIGN_OR_RETURN(DataSplits d, load_data(o.data, o.common.seed));
    if (d.train.images.dtype() != DType::kF32)
      return Status::invalid("`data` " + o.data + ": quantize calibrates on images, not token ids");
    cal.data = std::make_shared<DataSplits>(std::move(d));
    MOSAIC_ASSIGN_OR_RETURN(cal.norm, parse_normalization(o.normalize, cal.data->train));
    const int64_t rows = std::min(o.samples, cal.data->train.size());
    if (rows < 1) return Status::invalid("`data` " + o.data + ": the training split is empty");
    cal.common.batch = std::min(o.common.batch > 0 ? o.common.batch : 64, rows);
  }
  MOSAIC_ASSIGN_OR_RETURN(Graph loaded, load_model(o.model));
  // Batch normalisations fold into their convolutions first: the weights quantised are the
  // folded ones, and no float normalisation is left between two integer convolutions.
  const int folded = fold_batch_norms(loaded);
  MOSAIC_ASSIGN_OR_RETURN(cal.prepared, prepare_model(loaded, cal.common, nullptr));
  if (cal.data) {
    const TensorDesc& in = cal.prepared.value_descs.at(cal.prepared.inputs[0].name);
    Shape want = cal.data->train.images.shape();
    want[0] = cal.common.batch;
    if (cal.prepared.inputs.size() != 1 || in.shape != want || in.dtype != DType::kF32)
      return Status::invalid(o.model + ": input '" + cal.prepared.inputs[0].name + "' is " + in.str() + ", but " + o.data +
                             " gives batches of float32 " + shape_str(want));
  }
  const QdqOptions qo = qdq_options(o);
  MOSAIC_ASSIGN_OR_RETURN(QdqTargets targets, qdq_targets(loaded, cal.prepared.value_descs, qo));
  if (targets.nodes.empty())
    return Status::invalid(o.model + ": no node to quantise (op types: " + join(o.op_types) + ")");
  MOSAIC_ASSIGN_OR_RETURN(cal.batches, calibration_batches(o, cal.prepared, cal.common, cal.data, cal.norm));
  MOSAIC_ASSIGN_OR_RETURN(auto ranges, calibrate(o, cal.prepared, targets, cal.batches));
  cal.qdq = loaded;
  MOSAIC_ASSIGN_OR_RETURN(QdqRewrite rewrite, apply_qdq(cal.qdq, targets, ranges, qo));
  if (r) {
    r->model = o.model;
    r->method = o.method;
    r->calibration = cal.batches.description;
    r->batch = cal.common.batch > 0 ? cal.common.batch : cal.prepared.value_descs.at(cal.prepared.inputs[0].name).shape.at(0);
    r->calibration_rows = cal.batches.count * r->batch;
    r->nodes = targets.nodes;
    r->skipped = targets.skipped;
    r->notes = rewrite.notes;
    if (folded)
      r->notes.push_back("folded " + std::to_string(folded) + " BatchNormalization node(s) into the convolution before "
                         "each, then quantised the folded weights");
    r->weights = rewrite.weights;
    r->biases = rewrite.biases;
    for (const auto& a : targets.activations) {
      const auto [lo, hi] = ranges.at(a);
      const QuantParams p = activation_params(lo, hi, qo.activation_type, qo.symmetric_activations);
      r->activations.push_back({a, lo, hi, p.scale, p.zero_point});
    }
  }
  return cal;
}

/// Each node's first float output in the int8 model against the float one, on one batch.
Status measure_noise(const QuantizeOptions& o, const Calibrated& cal, const Graph& prepared_q,
                     const std::vector<Tensor>& inputs, QuantizeReport* r) {
  std::vector<std::string> names;
  std::vector<const Node*> nodes;
  for (const auto& n : cal.prepared.nodes) {
    if (n.outputs.empty() || n.outputs[0].empty()) continue;
    auto f = cal.prepared.value_descs.find(n.outputs[0]);
    auto q = prepared_q.value_descs.find(n.outputs[0]);
    if (f == cal.prepared.value_descs.end() || q == prepared_q.value_descs.end() || f->second.dtype != DType::kF32 ||
        q->second != f->second)
      continue;
    names.push_back(n.outputs[0]);
    nodes.push_back(&n);
  }
  std::vector<Tensor> got[2];
  for (int k = 0; k < 2; ++k) {
    const Graph& base = k == 0 ? cal.prepared : prepared_q;
    MOSAIC_ASSIGN_OR_RETURN(auto plan, plan_on(with_outputs(base, names), o.backend));
    MOSAIC_RETURN_IF_ERROR(plan->run(inputs, nullptr));
    for (size_t i = 0; i < base.outputs.size(); ++i) got[k].push_back(plan->output(i).clone());
    // The named values follow the graph's own outputs, except those that are outputs already.
    std::map<std::string, size_t> at;
    for (size_t i = 0; i < plan->graph().outputs.size(); ++i) at.emplace(plan->graph().outputs[i].name, i);
    std::vector<Tensor> values;
    for (const auto& name : names) values.push_back(plan->output(at.at(name)).clone());
    got[k].insert(got[k].end(), values.begin(), values.end());
  }
  const size_t own = cal.prepared.outputs.size();
  for (size_t i = 0; i < names.size(); ++i) {
    const Tensor &f = got[0][own + i], &q = got[1][prepared_q.outputs.size() + i];
    const double db = sqnr_db(q.f32(), f.f32(), f.numel());
    r->noise.push_back({nodes[i]->name, nodes[i]->op_type, names[i], db});
    if (r->first_noisy < 0 && !(db >= o.sqnr_threshold)) r->first_noisy = static_cast<int>(r->noise.size()) - 1;
  }
  if (got[0][0].dtype() == DType::kF32 && got[0][0].desc() == got[1][0].desc())
    r->output_sqnr_db = sqnr_db(got[1][0].f32(), got[0][0].f32(), got[0][0].numel());
  return Status::ok();
}

/// Both models' test accuracy and top-1 agreement over the test split.
Status measure_accuracy(const QuantizeOptions& o, const Calibrated& cal, const Graph& prepared_q, QuantizeReport* r) {
  const Dataset& test = cal.data->test;
  const TensorDesc& out = cal.prepared.value_descs.at(cal.prepared.outputs[0].name);
  if (test.size() == 0 || test.labels.rank() != 1) {
    r->evaluation = "not evaluated: " + o.data + " has no labelled test split";
    return Status::ok();
  }
  if (out.dtype != DType::kF32 || out.shape.size() != 2 || out.shape[1] != test.classes) {
    r->evaluation = "not evaluated: output '" + cal.prepared.outputs[0].name + "' is " + out.str() + ", not " +
                    std::to_string(test.classes) + " logits per image";
    return Status::ok();
  }
  const int64_t rows = o.eval_samples > 0 ? std::min(o.eval_samples, test.size()) : test.size();
  std::vector<int64_t> top[2];
  EvalCounts counts[2];
  for (int k = 0; k < 2; ++k) {
    MOSAIC_ASSIGN_OR_RETURN(auto plan, plan_on(k == 0 ? cal.prepared : prepared_q, o.backend));
    MOSAIC_ASSIGN_OR_RETURN(counts[k], evaluate_rows(*plan, test, 0, rows, cal.norm, "cross-entropy", &top[k]));
  }
  int64_t same = 0;
  for (size_t i = 0; i < top[0].size() && i < top[1].size(); ++i) same += top[0][i] == top[1][i];
  r->evaluated = true;
  r->eval_rows = static_cast<int64_t>(counts[0].rows);
  r->accuracy_f32 = counts[0].rows > 0 ? counts[0].correct / counts[0].rows : 0;
  r->accuracy_int8 = counts[1].rows > 0 ? counts[1].correct / counts[1].rows : 0;
  r->top1_agreement = top[0].empty() ? 0 : static_cast<double>(same) / static_cast<double>(top[0].size());
  r->evaluation = std::to_string(rows) + " images of " + o.data + "'s test split";
  return Status::ok();
}

}  // namespace

Expected<Graph> quantized_graph(const QuantizeOptions& o, QuantizeReport* report) {
  MOSAIC_ASSIGN_OR_RETURN(Calibrated cal, calibrate_model(o, report));
  return std::move(cal.qdq);
}

Expected<QuantizeReport> quantize_model(const QuantizeOptions& o) {
  QuantizeReport r;
  r.sqnr_threshold = o.sqnr_threshold;
  MOSAIC_ASSIGN_OR_RETURN(Calibrated cal, calibrate_model(o, &r));
  if (!o.output.empty()) {
    MOSAIC_RETURN_IF_ERROR(save_onnx(cal.qdq, o.output));
    r.output = o.output;
  }
  Graph qdq = cal.qdq;
  qdq.source = o.output.empty() ? o.model + " (quantised)" : o.output;
  MOSAIC_ASSIGN_OR_RETURN(Graph prepared_q, prepare_model(std::move(qdq), cal.common, nullptr));
  // The noise on one batch: the first test batch, or the first calibration batch.
  std::vector<Tensor> inputs;
  if (cal.data && cal.data->test.size() > 0) {
    inputs.push_back(image_batch(cal.data->test, cal.prepared.value_descs.at(cal.prepared.inputs[0].name), 0, cal.norm));
  } else {
    MOSAIC_ASSIGN_OR_RETURN(inputs, cal.batches.make(0));
  }
  MOSAIC_RETURN_IF_ERROR(measure_noise(o, cal, prepared_q, inputs, &r));
  if (!o.evaluate) r.evaluation = "not evaluated (evaluate off)";
  else if (!cal.data) r.evaluation = "not evaluated: no data (random inputs calibrated it)";
  else MOSAIC_RETURN_IF_ERROR(measure_accuracy(o, cal, prepared_q, &r));
  return r;
}

nlohmann::json quantize_report_json(const QuantizeReport& r) {
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(v > 0 ? "inf" : v < 0 ? "-inf" : "nan"); };
  nlohmann::json j = {{"schema", "mosaic.quantize/1"}, {"model", r.model},     {"output", r.output},
                      {"method", r.method},            {"calibration", r.calibration},
                      {"calibration_rows", r.calibration_rows}, {"batch", r.batch},
                      {"nodes", r.nodes},              {"skipped", r.skipped}, {"notes", r.notes},
                      {"weights", r.weights},          {"biases", r.biases},  {"sqnr_threshold", r.sqnr_threshold},
                      {"output_sqnr_db", number(r.output_sqnr_db)}, {"evaluation", r.evaluation}};
  j["activations"] = nlohmann::json::array();
  for (const auto& a : r.activations)
    j["activations"].push_back({{"name", a.name}, {"lo", a.lo}, {"hi", a.hi}, {"scale", a.scale}, {"zero_point", a.zero_point}});
  j["noise"] = nlohmann::json::array();
  for (const auto& n : r.noise)
    j["noise"].push_back({{"node", n.node}, {"op_type", n.op_type}, {"output", n.output}, {"sqnr_db", number(n.sqnr_db)}});
  j["first_noisy"] = r.first_noisy >= 0 ? nlohmann::json(r.noise[static_cast<size_t>(r.first_noisy)].node) : nlohmann::json();
  if (r.evaluated)
    j["accuracy"] = {{"f32", r.accuracy_f32}, {"int8", r.accuracy_int8}, {"top1_agreement", r.top1_agreement}, {"rows", r.eval_rows}};
  return j;
}

}  // namespace mosaic::api
