// Optimizers behind one public interface: state per parameter, hyperparameters, an update
// rule. The built-in rules follow PyTorch's defaults and semantics (docs/optimizers.md).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/status.hpp"

namespace mosaic {

/// Hyperparameters; each optimizer reads the ones it uses (PyTorch's names and defaults).
struct OptimizerConfig {
  double lr = 0.01;
  double momentum = 0;        ///< sgd, rmsprop
  double dampening = 0;       ///< sgd
  bool nesterov = false;      ///< sgd
  double weight_decay = 0;    ///< all (AdamW: decoupled)
  double beta1 = 0.9, beta2 = 0.999;  ///< adam, adamw
  double eps = -1;            ///< <0: the optimizer's default (1e-8; adagrad 1e-10)
  double alpha = 0.99;        ///< rmsprop smoothing
  double lr_decay = 0;        ///< adagrad
  double initial_accumulator_value = 0;  ///< adagrad
};

/// One optimizer instance updates a fixed list of parameters in place. Parameters are
/// identified by their position in the list passed to step().
class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config) : config_(config) {}
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  /// Applies one update to every parameter from its gradient.
  Status step(std::vector<ParamRef>& params);
  double lr() const { return config_.lr; }
  void set_lr(double lr) { config_.lr = lr; }
  const OptimizerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }

 protected:
  /// Updates one parameter. `state` is this parameter's persistent state (empty tensors
  /// on the first call; the rule allocates what it needs). `t` counts steps from 1.
  virtual void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& state, int64_t t) = 0;
  OptimizerConfig config_;

 private:
  std::vector<std::vector<std::vector<float>>> state_;
  int64_t steps_ = 0;
};

/// sgd (momentum, dampening, nesterov), adam, adamw, rmsprop, adagrad.
Expected<std::unique_ptr<Optimizer>> make_optimizer(const std::string& name, const OptimizerConfig& config);
std::vector<std::string> optimizer_names();

}  // namespace mosaic
