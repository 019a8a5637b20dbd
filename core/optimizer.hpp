// Optimizers behind one public interface: state per parameter, hyperparameters, an update
// rule. The built-in rules follow PyTorch's defaults and semantics (docs/optimizers.md).
//
// This header is also the plugin API: a user optimizer derives from mosaic::Optimizer,
// implements name(), state_names() and update(), and exports itself with
// MOSAIC_OPTIMIZER_PLUGIN (see examples/custom_optimizer/). Everything a plugin uses here
// is inline, so a plugin links against nothing of Mosaic's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ir/status.hpp"

/// Bumped whenever OptimizerConfig or the Optimizer class layout changes. A plugin built
/// against another version is refused when loaded.
#define MOSAIC_OPTIMIZER_API_VERSION 1

namespace mosaic {

struct ParamRef;

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
  /// Further hyperparameters by name (`--opt key=value`), for user optimizers. An
  /// optimizer lists the keys it reads in extra_keys(); others are refused.
  std::map<std::string, double> extra;

  double get(const std::string& key, double def) const {
    auto it = extra.find(key);
    return it == extra.end() ? def : it->second;
  }
};

/// One optimizer instance updates a fixed list of parameters in place. Parameters are
/// identified by their position in the list passed to step().
class Optimizer {
 public:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;
  /// Names of the per-parameter state buffers, each as large as the parameter, in the
  /// order update() receives them. Use PyTorch's names where the buffer has one
  /// (momentum_buffer, exp_avg, exp_avg_sq, square_avg, sum): optcheck maps the ONNX
  /// training-op test data onto them.
  virtual std::vector<std::string> state_names() const = 0;
  /// Initial value of state buffer k (zero unless overridden).
  virtual float initial_state(size_t /*k*/) const { return 0.f; }
  /// Keys of OptimizerConfig::extra this optimizer reads.
  virtual std::vector<std::string> extra_keys() const { return {}; }

  /// Applies one update to every parameter from its gradient (defined in Mosaic's core).
  Status step(std::vector<ParamRef>& params);
  /// The same on raw buffers: values[i] and grads[i] hold sizes[i] floats.
  Status step(const std::vector<float*>& values, const std::vector<const float*>& grads,
              const std::vector<int64_t>& sizes);

  double lr() const { return config_.lr; }
  void set_lr(double lr) { config_.lr = lr; }
  const OptimizerConfig& config() const { return config_; }
  int64_t steps() const { return steps_; }
  /// Sets the step counter (the next step is steps + 1) and, for parameter i, its state
  /// buffers; used to resume, and by optcheck to start from given state.
  void set_steps(int64_t steps) { steps_ = steps; }
  std::vector<std::vector<std::vector<float>>>& state() { return state_; }
  const std::vector<std::vector<std::vector<float>>>& state() const { return state_; }

 protected:
  /// Updates one parameter of n elements. `state` holds state_names().size() buffers of n
  /// floats (initialised by initial_state before the first call). `t` counts steps from 1.
  virtual void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& state,
                      int64_t t) = 0;
  OptimizerConfig config_;

 private:
  std::vector<std::vector<std::vector<float>>> state_;
  int64_t steps_ = 0;
};

/// Built-ins: sgd (momentum, dampening, nesterov), momentum, nesterov, adam, adamw,
/// rmsprop, adagrad; then any optimizer a loaded plugin provides.
Expected<std::unique_ptr<Optimizer>> make_optimizer(const std::string& name, const OptimizerConfig& config);
/// The checks make_optimizer runs first: every hyperparameter finite and in its range (lr > 0,
/// momentum and betas in [0, 1), ...); the error names the optimizer, the key and the range.
Status check_hyperparameters(const std::string& name, const OptimizerConfig& config);
std::vector<std::string> optimizer_names();
/// The hyperparameters a built-in optimizer reads, by their standard names (PyTorch's:
/// lr, momentum, dampening, nesterov, weight_decay, beta1, beta2, eps, alpha, lr_decay,
/// initial_accumulator_value); empty for a name that is not built in.
std::vector<std::string> builtin_hyperparameters(const std::string& optimizer);
/// Sets the standard hyperparameter `key` of `config` (nesterov: 0 or 1). kInvalidArgument
/// names the key if the built-in `optimizer` does not read it, with the keys it does read.
Status set_builtin_hyperparameter(const std::string& optimizer, const std::string& key, double value,
                                  OptimizerConfig& config);
/// Loads a plugin (a shared library exporting MOSAIC_OPTIMIZER_PLUGIN) and makes its
/// optimizer known to make_optimizer. Returns the optimizer's name. Refuses a library
/// built against another MOSAIC_OPTIMIZER_API_VERSION.
Expected<std::string> load_optimizer_plugin(const std::string& path);
/// Creates an optimizer from its hyperparameters (may throw; make_optimizer reports it).
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(const OptimizerConfig&)>;
/// The one way a user optimizer becomes known to make_optimizer, whatever it is written in:
/// load_optimizer_plugin registers a plugin's class through it, the Python package
/// (python/) a Python class. `origin` (the plugin's path, "python:module.Class") names it in
/// messages. A built-in name, or a name another origin registered, is refused unless
/// `replace` (the Python package redefining a class in a notebook).
Status register_optimizer(const std::string& name, OptimizerFactory factory, const std::string& origin,
                          bool replace = false);

}  // namespace mosaic

/// Exports CLASS (constructible from an OptimizerConfig) as the optimizer NAME.
#define MOSAIC_OPTIMIZER_PLUGIN(NAME, CLASS)                                                      \
  extern "C" int mosaic_optimizer_api_version() { return MOSAIC_OPTIMIZER_API_VERSION; }          \
  extern "C" const char* mosaic_optimizer_plugin_name() { return NAME; }                          \
  extern "C" mosaic::Optimizer* mosaic_create_optimizer(const mosaic::OptimizerConfig* config) { \
    return new CLASS(*config);                                                                    \
  }
