// Models and their inputs for the API functions: load (file or zoo:NAME), prepare with the
// command's batch and --shape bindings, random or real-data inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "core/prepare.hpp"

namespace mosaic::api {

/// How a command prepares its model: batch, symbolic dimensions, threads, input seed.
struct CommonOptions {
  int64_t batch = 0;  ///< 0: model's own batch (symbolic -> 1)
  std::vector<std::string> shapes;  ///< --shape NAME=N: symbolic dimensions bound by name
  /// --input NAME=FILE: an input's values from an .npy file (frontends/data/npy.hpp) or an
  /// ONNX TensorProto .pb, instead of random ones; its type and shape must be the input's.
  std::vector<std::string> inputs;
  int threads = 0;
  uint64_t seed = 42;
};

/// A model path, or `zoo:NAME` for a built-in model.
Expected<Graph> load_model(const std::string& spec);
/// Writes built-in model `name` (zoo:NAME without the prefix) as an ONNX file, its weights
/// drawn from `seed`; returns the model's one-line description. Errors name an unknown model
/// (with the known ones) or the output that cannot be written.
Expected<std::string> export_model(const std::string& name, const std::string& output, uint64_t seed = 0);
/// An unsupported-op error with the backends that lack a kernel for the op appended.
Status explain_unsupported(const Status& st, const Graph& g);
/// Loads and prepares (batch, --shape); an unsupported op names the backends lacking it.
Expected<Graph> load_prepared(const std::string& spec, const CommonOptions& c, PrepareReport* report);
/// Prepares a model already loaded (or rewritten in memory) as load_prepared does.
Expected<Graph> prepare_model(Graph g, const CommonOptions& c, PrepareReport* report);
/// Loads and prepares a model to train or gradient-check at `batch`: one input, a logits
/// output first.
Expected<Graph> load_trainable(const std::string& spec, int64_t batch);
/// The values of every graph input: from its file where `c.inputs` names one, else random
/// from `c.seed`: floats uniform in [0, 1); sequence lengths in [1, T]; ids below the
/// vocabulary of the Gather that reads them; other integers (masks) 0 or 1, bools half true
/// (core/inputs.hpp). An integer input read as a shape, axes or position is an error asking
/// for --input NAME=FILE, as are a file that does not load or does not match its input.
/// `description`, if given, says where the values came from in words for reports.
Expected<std::vector<Tensor>> model_inputs(const Graph& g, const CommonOptions& c, std::string* description = nullptr);

/// Every form of a --data spec, for help texts: images (fashion-mnist, idx:DIR,
/// synthetic:N,C,H,W,K), token ids (text:FILE, text-chars:FILE, synthetic-tokens:N,T,V) and
/// classified token sequences (synthetic-classes:N,T,V,K).
std::string data_forms();

/// bench --data: the model's single input filled with the first images of the training
/// set (and their labels, for training), instead of random values.
struct RealBatch {
  std::vector<Tensor> inputs;
  Tensor labels;  ///< undefined when the data's classes do not match the logits
  std::string description;
};
Expected<RealBatch> real_batch(const Graph& g, const std::string& spec, uint64_t seed);

}  // namespace mosaic::api
