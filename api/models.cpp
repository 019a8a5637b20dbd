#include "api/models.hpp"
#include "api/option_rules.hpp"

#include <algorithm>
#include <map>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "api/util.hpp"
#include "backends/registry.hpp"
#include "core/inputs.hpp"
#include "ir/checked.hpp"
#include "ir/elements.hpp"
#include "frontends/data/npy.hpp"
#include "frontends/data/text.hpp"
#include "frontends/zoo/zoo.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "operators/schema.hpp"

namespace mosaic::api {

Expected<std::string> export_model(const std::string& name, const std::string& output, uint64_t seed) {
  MOSAIC_RETURN_IF_ERROR(check_output_path(output, "`output`"));
  MOSAIC_ASSIGN_OR_RETURN(Graph g, build_zoo_model(name, seed));
  MOSAIC_RETURN_IF_ERROR(save_onnx(g, output));
  return zoo_description(name);
}

Expected<Graph> load_model(const std::string& spec) {
  if (spec.rfind("zoo:", 0) == 0) {
    auto g = build_zoo_model(spec.substr(4));
    if (g.ok()) g->source = spec;
    return g;
  }
  return load_onnx(spec);
}

Status explain_unsupported(const Status& st, const Graph& g) {
  if (st.code() != StatusCode::kUnsupported) return st;
  std::string message = st.message();
  for (const auto& n : g.nodes)
    if (st.message().find(n.label()) != std::string::npos) {
      // A custom domain's operator: the message already says which plugin is missing.
      if (!find_schema(n.op_key()) && !n.domain.empty() && n.domain != "ai.onnx") break;
      std::string lacking;
      for (const auto& b : builtin_registry().backends())
        if (!builtin_registry().has_kernel(b, n.op_key())) lacking += (lacking.empty() ? "" : ", ") + b;
      if (!lacking.empty()) message += " (backends without a kernel for it: " + lacking + ")";
      break;
    }
  // Every unsupported op of the model at once, not one per attempt: op, node count, first node.
  std::map<std::string, std::pair<int, std::string>> missing;
  for (const auto& n : g.nodes) {
    const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
    const OpSchema* s = find_schema(n.op_key());
    if (s && (onnx ? s->domain.empty() : s->domain == n.domain)) continue;
    auto& [count, first] = missing[(onnx ? "" : n.domain + ".") + n.op_type];
    if (count++ == 0) first = n.name;
  }
  if (missing.size() > 1 || (missing.size() == 1 && missing.begin()->second.first > 1)) {
    int nodes = 0;
    std::string list;
    for (const auto& [op, v] : missing) {
      nodes += v.first;
      list += (list.empty() ? "" : ", ") + op + " (" + std::to_string(v.first) + " node" + (v.first == 1 ? "" : "s") +
              ", first '" + v.second + "')";
    }
    message += "; in all, " + std::to_string(missing.size()) + " op type" + (missing.size() == 1 ? "" : "s") + " in " +
               std::to_string(nodes) + " node" + (nodes == 1 ? "" : "s") + " are not supported: " + list;
  }
  return Status(st.code(), message);
}

namespace {

/// `inputs` (--input NAME=FILE) of `g`: the tensors by input name, each checked against the
/// input's element type and its shape: the bound one once `prepared`, else the declared one
/// (symbolic dimensions free). Once prepared, the names bound as constants at load are skipped.
Expected<std::map<std::string, Tensor>> given_inputs(const Graph& g, const std::vector<std::string>& specs,
                                                     bool prepared) {
  std::map<std::string, Tensor> given;
  for (const auto& spec : specs) {
    const size_t eq = spec.find('=');
    const std::string what = "`inputs` '" + spec + "'";
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      return Status::invalid(what + ": expected NAME=FILE (an .npy file, or an ONNX TensorProto .pb)");
    const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
    if (given.count(name)) return Status::invalid(what + ": input '" + name + "' is given twice");
    if (prepared && g.constants.count(name)) continue;  // bound at load from this file
    const auto in = std::find_if(g.inputs.begin(), g.inputs.end(), [&](const auto& i) { return i.name == name; });
    if (in == g.inputs.end()) {
      std::string names;
      for (const auto& i : g.inputs) names += (names.empty() ? "'" : ", '") + i.name + "'";
      return Status::invalid(what + ": " + g.source + " has no input '" + name + "' (its inputs: " + names + ")");
    }
    const bool pb = file.size() > 3 && file.compare(file.size() - 3, 3, ".pb") == 0;
    Expected<Tensor> t = pb ? load_tensor_pb(file) : load_npy(file);
    if (!t.ok()) return t.status().with_context(what);
    // Prepared: the bound shape; loaded only: the declared one, symbolic dimensions free.
    const auto bound = prepared ? g.value_descs.find(name) : g.value_descs.end();
    const DType dtype = bound != g.value_descs.end() ? bound->second.dtype : in->dtype;
    bool fits = t->dtype() == dtype;
    std::string want;
    if (bound != g.value_descs.end()) {
      fits = fits && t->shape() == bound->second.shape;
      want = bound->second.str() + " (its shape as --batch and --shape bound it)";
    } else {
      want = std::string(dtype_name(dtype));
      if (in->has_shape) {
        fits = fits && t->shape().size() == in->dims.size();
        want += "[";
        for (size_t d = 0; d < in->dims.size(); ++d) {
          const bool symbolic = d < in->dim_params.size() && !in->dim_params[d].empty();
          fits = fits && (symbolic || d >= t->shape().size() || t->shape()[d] == in->dims[d]);
          want += (d ? "," : "") + (symbolic ? in->dim_params[d] : std::to_string(in->dims[d]));
        }
        want += "]";
      }
    }
    if (!fits)
      return Status::invalid(what + ": the file holds " + t->desc().str() + ", input '" + name + "' is " + want);
    given[name] = std::move(t.value());
  }
  return given;
}

}  // namespace

Expected<Graph> load_prepared(const std::string& spec, const CommonOptions& c, PrepareReport* report) {
  // Every command that prepares a model refuses what the CLI refuses (0: the model's batch).
  std::vector<std::pair<std::string, double>> numbers = {{"threads", c.threads}};
  if (c.batch != 0) numbers.push_back({"batch", static_cast<double>(c.batch)});
  MOSAIC_RETURN_IF_ERROR(check_numbers("", numbers));
  MOSAIC_ASSIGN_OR_RETURN(Graph g, load_model(spec));
  return prepare_model(std::move(g), c, report);
}

Expected<Graph> prepare_model(Graph g, const CommonOptions& c, PrepareReport* report) {
  PrepareOptions po;
  po.batch = c.batch;
  // An integer input read as a shape, axes or position must be known at load: its file's
  // values are bound as a constant; without one, the error asks for it.
  MOSAIC_ASSIGN_OR_RETURN(auto given, given_inputs(g, c.inputs, false));
  for (const auto& in : g.inputs) {
    if (in.dtype == DType::kF32) continue;
    const std::string why = unguessable_reader(g, in.name);
    if (why.empty()) continue;
    if (!given.count(in.name))
      return Status::invalid(g.source + ": input '" + in.name + "': " + why +
                             ", which must be known at load time; give its values with --input " + in.name +
                             "=FILE (.npy or ONNX TensorProto .pb)");
    po.constant_inputs[in.name] = given.at(in.name);
  }
  // Each `shapes` entry binds one name or several, comma-separated ("batch=8,sequence=128").
  for (const auto& entry : c.shapes) {
    size_t from = 0;
    while (from <= entry.size()) {
      const size_t comma = std::min(entry.find(',', from), entry.size());
      const std::string spec = entry.substr(from, comma - from);
      from = comma + 1;
      const size_t eq = spec.find('=');
      const std::string name = spec.substr(0, eq == std::string::npos ? 0 : eq);
      char* end = nullptr;
      errno = 0;
      const long long v = eq == std::string::npos ? 0 : std::strtoll(spec.c_str() + eq + 1, &end, 10);
      if (name.empty() || eq == std::string::npos || !end || *end || end == spec.c_str() + eq + 1 || errno || v < 1 ||
          v > kMaxDim)
        return Status::invalid("`shapes` '" + spec + "': expected NAME=N with a symbolic dimension's name and N in [1, 2^31 - 1]");
      if (auto it = po.dims.find(name); it != po.dims.end() && it->second != v)
        return Status::invalid("`shapes`: '" + name + "' is bound twice (" + std::to_string(it->second) + " and " +
                               std::to_string(v) + ")");
      po.dims[name] = v;
    }
  }
  // Output shapes that depend on input values (NonZero, ...) are planned from the inputs
  // model_inputs makes (the files given, else seeded values): the ones the commands run.
  po.specialise = [&c](const Graph& bound) { return model_inputs(bound, c, nullptr); };
  Graph original = g;
  auto r = prepare_graph(g, builtin_registry(), po);
  if (!r.ok()) return explain_unsupported(r.status(), original);
  if (report) {
    *report = r.value();
    for (const auto& [name, t] : po.constant_inputs)
      report->notes.push_back("input '" + name + "' bound at load to its file's " + t.desc().str() +
                              " (a shape, axes or position)");
  }
  return g;
}

Expected<std::vector<Tensor>> model_inputs(const Graph& g, const CommonOptions& c, std::string* description) {
  MOSAIC_ASSIGN_OR_RETURN(auto given, given_inputs(g, c.inputs, true));
  std::mt19937_64 rng(c.seed);
  std::uniform_real_distribution<float> dist(0.f, 1.f);
  std::vector<Tensor> inputs;
  std::string ids, files;
  for (const auto& in : g.inputs) {
    if (auto it = given.find(in.name); it != given.end()) {
      files += "; '" + in.name + "' from its file";
      inputs.push_back(it->second);
      continue;
    }
    Tensor t = Tensor::empty(g.value_descs.at(in.name));
    if (t.dtype() == DType::kF32) {
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
      inputs.push_back(std::move(t));
      continue;
    }
    if (dtype_is_float(t.dtype())) {  // float16, bfloat16, float64, the 8- and 4-bit floats: rounded once
      for (int64_t i = 0; i < t.numel(); ++i) store_f64(t.dtype(), t.data(), i, dist(rng));
      inputs.push_back(std::move(t));
      continue;
    }
    if (!dtype_is_integer(t.dtype()) && t.dtype() != DType::kBool)
      return Status::unsupported(g.source + ": input '" + in.name + "' is " + dtype_name(t.dtype()) +
                                 ", of which Mosaic makes no random values; give its values with --input " + in.name +
                                 "=FILE");
    // Integers and bools: values the model accepts (a shape or position was bound at load),
    // written in the input's own type.
    std::string why;
    if (t.dtype() == DType::kBool) {
      std::bernoulli_distribution d(0.5);
      for (int64_t i = 0; i < t.numel(); ++i) static_cast<uint8_t*>(t.data())[i] = d(rng);
      ids += "; '" + in.name + "': true or false, each half the time (a mask)";
    } else if (const int64_t longest = sequence_length_bound(g, in.name, &why); longest > 0) {
      // sequence_lens: lengths a recurrent op accepts, in [1, T] (not ids below 2).
      std::uniform_int_distribution<int64_t> d(1, longest);
      for (int64_t i = 0; i < t.numel(); ++i) store_i64(t.dtype(), t.data(), i, d(rng));
      ids += "; '" + in.name + "': lengths uniform in [1, " + std::to_string(longest) + "] (" + why + ")";
    } else if (const int64_t bound = index_bound(g, in.name, &why); bound > 0) {
      fill_ids(t, bound, rng);
      ids += "; '" + in.name + "': ids uniform in [0, " + std::to_string(bound) + ") (" + why + ")";
    } else {
      fill_ids(t, 2, rng);  // read as values only (an attention mask): 0 or 1
      ids += "; '" + in.name + "': 0 or 1 (a mask: no Gather, shape or length reads it)";
    }
    inputs.push_back(std::move(t));
  }
  // Every key of `given` is an input (given_inputs checked): fewer of them than inputs, some random.
  if (description)
    *description = given.size() < g.inputs.size()
                       ? "random uniform [0, 1) (seed " + std::to_string(c.seed) + ")" + ids + files
                       : "from files";
  return inputs;
}

namespace {

/// bench --data with token data (text:FILE, text-chars:FILE, synthetic-tokens:...,
/// synthetic-classes:...): the first sequences of the training split as the ids [batch, T],
/// their labels ([batch, T] next-token, or [batch] classes).
Expected<RealBatch> token_batch(const Graph& g, const std::string& spec, uint64_t seed) {
  const TensorDesc& desc = g.value_descs.at(g.inputs[0].name);
  if (desc.dtype != DType::kI64 || desc.shape.size() != 2)
    return Status::invalid("`data` " + spec + " is token data: " + g.source + "'s input '" + g.inputs[0].name + "' is " +
                           desc.str() + ", not token ids [batch, sequence] (int64)");
  TokenTask task;
  task.seq = desc.shape[1];
  task.model_vocab = index_bound(g, g.inputs[0].name);
  if (task.model_vocab <= 0)
    return Status::invalid("`data` " + spec + ": no embedding (Gather) reads " + g.source + "'s input '" +
                           g.inputs[0].name + "', so its vocabulary is unknown");
  MOSAIC_ASSIGN_OR_RETURN(DataSplits data, load_token_data(spec, task, seed));
  const Dataset& d = data.train;
  const int64_t batch = desc.shape[0];
  if (batch > d.size())
    return Status::invalid("`data` " + spec + ": batch " + std::to_string(batch) + " is larger than the training set (" +
                           std::to_string(d.size()) + " sequences of " + std::to_string(task.seq) + " tokens)");
  RealBatch r;
  Tensor x = Tensor::empty(desc);
  std::memcpy(x.i64(), d.images.i64(), static_cast<size_t>(x.numel()) * sizeof(int64_t));
  r.inputs.push_back(std::move(x));
  Shape labels = d.labels.shape();  // [N, T] a label per position, or [N] one per sequence
  labels[0] = batch;
  r.labels = Tensor::empty({DType::kI64, labels});
  std::memcpy(r.labels.i64(), d.labels.i64(), static_cast<size_t>(r.labels.numel()) * sizeof(int64_t));
  r.description = spec + ": training sequences 0.." + std::to_string(batch - 1) + " of " + std::to_string(task.seq) +
                  " tokens (real data, --data)";
  return r;
}

}  // namespace

std::string data_forms() {
  return "images: fashion-mnist, idx:DIR or synthetic:N,C,H,W,K; token ids: text:FILE (bytes), text-chars:FILE "
         "(UTF-8 characters) or synthetic-tokens:N,T,V; classified token sequences: synthetic-classes:N,T,V,K";
}

Expected<RealBatch> real_batch(const Graph& g, const std::string& spec, uint64_t seed) {
  if (g.inputs.size() != 1) return Status::invalid("`data` needs a model with one input; " + g.source + " has " + std::to_string(g.inputs.size()));
  if (is_token_spec(spec)) return token_batch(g, spec, seed);
  MOSAIC_ASSIGN_OR_RETURN(DataSplits data, load_data(spec, seed));
  const Dataset& d = data.train;
  const TensorDesc& desc = g.value_descs.at(g.inputs[0].name);
  const int64_t batch = desc.shape.at(0);
  Shape want{batch};
  want.insert(want.end(), d.images.shape().begin() + 1, d.images.shape().end());
  if (desc.shape != want)
    return Status::invalid("`data` " + spec + ": " + g.source + "'s input '" + g.inputs[0].name + "' is " +
                           shape_str(desc.shape) + " but the data gives batches of " + shape_str(want));
  // Images are float32: a float16 (or other float) input takes them rounded once to its type.
  if (!dtype_is_float(desc.dtype))
    return Status::invalid("`data` " + spec + ": " + g.source + "'s input '" + g.inputs[0].name + "' is " +
                           dtype_name(desc.dtype) + ", which images (float32 values) do not fill");
  if (batch > d.size())
    return Status::invalid("`data` " + spec + ": batch " + std::to_string(batch) + " is larger than the training set (" +
                           std::to_string(d.size()) + " images)");
  RealBatch r;
  Tensor x = Tensor::empty(desc);
  convert_elements(DType::kF32, d.images.f32(), desc.dtype, x.data(), x.numel());
  r.inputs.push_back(std::move(x));
  r.labels = Tensor::empty({DType::kI64, {batch}});
  std::memcpy(r.labels.i64(), d.labels.i64(), static_cast<size_t>(batch) * sizeof(int64_t));
  r.description = spec + ": training images 0.." + std::to_string(batch - 1) + " (real data, --data)";
  if (desc.dtype != DType::kF32) r.description += ", rounded once to " + std::string(dtype_name(desc.dtype));
  const Shape logits = g.value_descs.at(g.outputs[0].name).shape;
  if (logits.size() == 2 && logits[1] != d.classes) r.labels = Tensor();  // labels do not fit the logits: random ones
  return r;
}

Expected<Graph> load_trainable(const std::string& spec, int64_t batch) {
  Graph g;
  if (spec.rfind("zoo:", 0) == 0) {
    MOSAIC_ASSIGN_OR_RETURN(g, build_zoo_model(spec.substr(4)));
    g.source = spec;
  } else {
    MOSAIC_ASSIGN_OR_RETURN(g, load_onnx(spec));
  }
  PrepareOptions po;
  po.batch = batch;
  po.fold_parameters = false;  // a parameter used through Expand/Transpose/Gather stays one parameter
  MOSAIC_RETURN_IF_ERROR(prepare_graph(g, builtin_registry(), po).status());
  if (g.inputs.size() != 1 || g.outputs.empty())
    return Status::invalid(spec + ": training needs a model with one input and a logits output");
  return g;
}

}  // namespace mosaic::api
