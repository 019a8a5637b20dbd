// optcheck: validates an optimizer (built-in or plugin) with verdicts.
//
//  1. trajectories: the optimizer and an independent double-precision reference of a
//     built-in rule are fed the same fixed gradient sequences, and run on the same
//     closed-loop quadratic, under several hyperparameter settings (weight decay among
//     them); the parameter trajectories must agree step by step;
//  2. ONNX training-op test data (ai.onnx.preview.training Adam, Adagrad, Momentum), with
//     ONNX's hyperparameters mapped onto PyTorch's (docs/optimizers.md);
//  3. convergence on an ill-conditioned quadratic and on the Rosenbrock function;
//  4. a real network: its gradients are gradchecked first, then the optimizer must drive
//     the loss of one fixed batch down.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/optimizer.hpp"
#include "ir/status.hpp"

namespace mosaic {

struct OptcheckOptions {
  std::string optimizer;   ///< name to check (built-in, or provided by a loaded plugin)
  std::string reference;   ///< built-in rule the trajectories are compared with ("" = optimizer
                           ///< itself if it is built in; none for a new rule)
  OptimizerConfig config;  ///< hyperparameters of the convergence and network checks
  bool lr_given = false;   ///< config.lr was set by the user (else per-problem defaults)
  std::string onnx_data = "/usr/share/libonnx-testdata/data/node";
  std::string model = "zoo:fmnist-cnn";  ///< "" skips the network check
  std::string backend = "naive";
  std::string data = "fashion-mnist";    ///< where the network check's batch comes from
  int64_t steps = 30;                    ///< network check steps
  double tolerance = 1e-4;  ///< trajectory: max |p - p_ref| / (largest movement of p_ref)
  uint64_t seed = 1;
  int threads = 0;  ///< OpenMP/OpenBLAS/oneDNN threads (0: the defaults)
};

struct OptcheckResult {
  std::string check;    ///< e.g. "trajectory weight_decay", "onnx test_adam", "rosenbrock"
  std::string verdict;  ///< PASS, FAIL or SKIP
  std::string detail;
};

/// Built-in rules with a reference implementation.
std::vector<std::string> optcheck_references();

/// Double-precision reference of built-in rule `name` (PyTorch's semantics, written
/// independently of the float implementations in core/optimizer.cpp). state holds the
/// rule's buffers by PyTorch name; t counts from 1.
Status reference_step(const std::string& name, const OptimizerConfig& config, std::vector<double>& p,
                      const std::vector<double>& g, std::map<std::string, std::vector<double>>& state, int64_t t);

std::vector<OptcheckResult> check_trajectories(const OptcheckOptions& o);
std::vector<OptcheckResult> check_onnx_data(const OptcheckOptions& o);
std::vector<OptcheckResult> check_convergence(const OptcheckOptions& o);
std::vector<OptcheckResult> check_network(const OptcheckOptions& o);

/// All four; an error only for bad options (unknown optimizer or reference).
Expected<std::vector<OptcheckResult>> optcheck(const OptcheckOptions& o);

}  // namespace mosaic
