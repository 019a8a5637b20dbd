// Models and their inputs for the commands: load (file or zoo:NAME), prepare with the
// command's batch and --shape bindings, random or real-data inputs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph.hpp"
#include "core/prepare.hpp"
#include "frontends/cli/commands.hpp"

namespace mosaic::cli {

/// A model path, or `zoo:NAME` for a built-in model.
Expected<Graph> load_model(const std::string& spec);
/// An unsupported-op error with the backends that lack a kernel for the op appended.
Status explain_unsupported(const Status& st, const Graph& g);
/// Loads and prepares (batch, --shape); an unsupported op names the backends lacking it.
Expected<Graph> load_prepared(const std::string& spec, const CommonOptions& c, PrepareReport* report);
/// Uniform [0, 1) values for every float input, from `seed`.
std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed);

/// bench --data: the model's single input filled with the first images of the training
/// set (and their labels, for training), instead of random values.
struct RealBatch {
  std::vector<Tensor> inputs;
  Tensor labels;  ///< undefined when the data's classes do not match the logits
  std::string description;
};
Expected<RealBatch> real_batch(const Graph& g, const std::string& spec, uint64_t seed);

}  // namespace mosaic::cli
