#include "core/optimizer.hpp"
#include "core/python_host.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <sstream>
#include <limits>
#include <cmath>
#include <mutex>

#include "core/plan.hpp"

namespace mosaic {

Status Optimizer::step(std::vector<ParamRef>& params) {
  std::vector<float*> values;
  std::vector<const float*> grads;
  std::vector<int64_t> sizes;
  for (ParamRef& p : params) {
    if (!p.grad.defined() || p.grad.numel() != p.value.numel())
      return Status::invalid(name() + ": parameter '" + p.name + "' has no gradient of its size");
    values.push_back(p.value.f32());
    grads.push_back(p.grad.f32());
    sizes.push_back(p.value.numel());
  }
  return step(values, grads, sizes);
}

Status Optimizer::step(const std::vector<float*>& values, const std::vector<const float*>& grads,
                       const std::vector<int64_t>& sizes) {
  if (values.size() != grads.size() || values.size() != sizes.size())
    return Status::invalid(name() + ": values, gradients and sizes differ in count");
  if (state_.empty()) state_.resize(values.size());
  if (state_.size() != values.size()) return Status::invalid(name() + ": the parameter list changed between steps");
  try {
    const size_t buffers = state_names().size();
    for (size_t i = 0; i < values.size(); ++i) {
      auto& st = state_[i];
      if (st.empty())
        for (size_t k = 0; k < buffers; ++k) st.emplace_back(static_cast<size_t>(sizes[i]), initial_state(k));
      if (st.size() != buffers)
        return Status::invalid(name() + ": parameter " + std::to_string(i) + " has " + std::to_string(st.size()) +
                               " state buffers, the optimizer declares " + std::to_string(buffers));
      for (const auto& b : st)
        if (static_cast<int64_t>(b.size()) != sizes[i])
          return Status::invalid(name() + ": a state buffer of parameter " + std::to_string(i) + " has the wrong size");
    }
    ++steps_;
    for (size_t i = 0; i < values.size(); ++i) update(values[i], grads[i], sizes[i], state_[i], steps_);
  } catch (const std::exception& e) {
    return Status::internal("optimizer " + name() + " threw: " + e.what());
  }
  return Status::ok();
}

namespace {

double eps_or(const OptimizerConfig& c, double def) { return c.eps < 0 ? def : c.eps; }

// The built-in rules are elementwise and memory-bound: each loop is split over the OpenMP
// threads (large tensors only) and vectorised. Arithmetic is in double, rounded to float once
// per stored value, except the square root and the division by it, which are in float as in
// PyTorch (in double they cost as much as the memory traffic).
constexpr int64_t kParallelMin = 1 << 15;

/// PyTorch SGD: g += wd p; b = mu b + (1 - dampening) g (b = g on the first step);
/// g = nesterov ? g + mu b : b; p -= lr g.
class Sgd final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "sgd"; }
  std::vector<std::string> state_names() const override {
    return config_.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    const double lr = config_.lr, wd = config_.weight_decay, mu = config_.momentum, damp = config_.dampening;
    if (mu == 0) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] - lr * (g[i] + wd * p[i]));
      return;
    }
    float* b = st[0].data();
    // First step: b = g; later: b = mu b + (1 - dampening) g.
    const double keep = t == 1 ? 0 : mu, take = t == 1 ? 1 : 1 - damp;
    // Nesterov steps along d + mu b, plain momentum along b.
    const double own = config_.nesterov ? 1 : 0, ahead = config_.nesterov ? mu : 1;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + wd * p[i];
      const float bi = static_cast<float>(keep * b[i] + take * d);
      b[i] = bi;
      p[i] = static_cast<float>(p[i] - lr * (own * d + ahead * bi));
    }
  }
};

/// PyTorch Adam (weight decay added to the gradient) and AdamW (decoupled: p *= 1 - lr wd):
/// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class Adam final : public Optimizer {
 public:
  Adam(OptimizerConfig c, bool decoupled) : Optimizer(c), decoupled_(decoupled) {}
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    const double lr = config_.lr, wd = config_.weight_decay, b1 = config_.beta1, b2 = config_.beta2;
    const double eps = eps_or(config_, 1e-8);
    const double bc1 = 1 - std::pow(b1, static_cast<double>(t)), bc2 = 1 - std::pow(b2, static_cast<double>(t));
    const double step = lr / bc1;
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2)), eps_f = static_cast<float>(eps);
    // AdamW shrinks the weight; Adam adds the decay to the gradient.
    const double shrink = decoupled_ ? 1 - lr * wd : 1, coupled = decoupled_ ? 0 : wd;
    float* m = st[0].data();
    float* v = st[1].data();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const double pi = p[i] * shrink, d = g[i] + coupled * p[i];
      const float mi = static_cast<float>(b1 * m[i] + (1 - b1) * d);
      const float vi = static_cast<float>(b2 * v[i] + (1 - b2) * d * d);
      m[i] = mi;
      v[i] = vi;
      p[i] = static_cast<float>(pi - step * (mi / (std::sqrt(vi) / bc2_sqrt + eps_f)));
    }
  }

 private:
  bool decoupled_;
};

/// PyTorch RMSprop (not centered): v = a v + (1 - a) g^2; with momentum mu:
/// b = mu b + g / (sqrt(v) + eps), p -= lr b; else p -= lr g / (sqrt(v) + eps).
class RmsProp final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "rmsprop"; }
  std::vector<std::string> state_names() const override {
    if (config_.momentum != 0) return {"square_avg", "momentum_buffer"};
    return {"square_avg"};
  }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t) override {
    const double lr = config_.lr, wd = config_.weight_decay, a = config_.alpha, mu = config_.momentum;
    const float eps_f = static_cast<float>(eps_or(config_, 1e-8));
    float* v = st[0].data();
    if (mu == 0) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
      for (int64_t i = 0; i < n; ++i) {
        const double d = g[i] + wd * p[i];
        const float vi = static_cast<float>(a * v[i] + (1 - a) * d * d);
        v[i] = vi;
        p[i] = static_cast<float>(p[i] - lr * (static_cast<float>(d) / (std::sqrt(vi) + eps_f)));
      }
      return;
    }
    float* b = st[1].data();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + wd * p[i];
      const float vi = static_cast<float>(a * v[i] + (1 - a) * d * d);
      v[i] = vi;
      const float bi = static_cast<float>(mu * b[i] + static_cast<float>(d) / (std::sqrt(vi) + eps_f));
      b[i] = bi;
      p[i] = static_cast<float>(p[i] - lr * bi);
    }
  }
};

/// PyTorch Adagrad: clr = lr / (1 + (t - 1) lr_decay); s += g^2; p -= clr g / (sqrt(s) + eps).
class Adagrad final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "adagrad"; }
  std::vector<std::string> state_names() const override { return {"sum"}; }
  float initial_state(size_t) const override { return static_cast<float>(config_.initial_accumulator_value); }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    const double wd = config_.weight_decay;
    const float eps_f = static_cast<float>(eps_or(config_, 1e-10));
    const double clr = config_.lr / (1 + static_cast<double>(t - 1) * config_.lr_decay);
    float* sum = st[0].data();
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + wd * p[i];
      const float si = static_cast<float>(sum[i] + d * d);
      sum[i] = si;
      p[i] = static_cast<float>(p[i] - clr * (static_cast<float>(d) / (std::sqrt(si) + eps_f)));
    }
  }
};

struct PluginTable {
  std::mutex mu;
  std::map<std::string, std::pair<OptimizerFactory, std::string>> by_name;  ///< name -> (factory, origin)
};

PluginTable& plugins() {
  static PluginTable table;
  return table;
}

std::vector<std::string> builtin_names() {
  return {"sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop", "adagrad"};
}

Status check_extra_keys(const Optimizer& opt, const OptimizerConfig& c) {
  const auto keys = opt.extra_keys();
  for (const auto& kv : c.extra)
    if (std::find(keys.begin(), keys.end(), kv.first) == keys.end()) {
      std::string known;
      for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
      return Status::invalid("optimizer " + opt.name() + " has no hyperparameter '" + kv.first + "'" +
                             (known.empty() ? std::string(" (it reads none)") : " (it reads: " + known + ")"));
    }
  return Status::ok();
}

}  // namespace

std::vector<std::string> builtin_hyperparameters(const std::string& o) {
  if (o == "sgd" || o == "momentum" || o == "nesterov") return {"lr", "momentum", "dampening", "nesterov", "weight_decay"};
  if (o == "adam" || o == "adamw") return {"lr", "beta1", "beta2", "eps", "weight_decay"};
  if (o == "rmsprop") return {"lr", "alpha", "eps", "momentum", "weight_decay"};
  if (o == "adagrad") return {"lr", "lr_decay", "eps", "initial_accumulator_value", "weight_decay"};
  return {};
}

Status set_builtin_hyperparameter(const std::string& optimizer, const std::string& key, double value,
                                  OptimizerConfig& c) {
  const auto keys = builtin_hyperparameters(optimizer);
  if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
    std::string known;
    for (const auto& k : keys) known += (known.empty() ? "" : ", ") + k;
    return Status::invalid("optimizer " + optimizer + " has no hyperparameter '" + key + "' (it reads: " + known + ")");
  }
  if (key == "nesterov" && value != 0 && value != 1) return Status::invalid("nesterov must be 0 or 1");
  double* field = key == "lr" ? &c.lr : key == "momentum" ? &c.momentum : key == "dampening" ? &c.dampening
                : key == "weight_decay" ? &c.weight_decay : key == "beta1" ? &c.beta1 : key == "beta2" ? &c.beta2
                : key == "eps" ? &c.eps : key == "alpha" ? &c.alpha : key == "lr_decay" ? &c.lr_decay
                : key == "initial_accumulator_value" ? &c.initial_accumulator_value : nullptr;
  if (key == "nesterov") c.nesterov = value != 0;
  else *field = value;
  return Status::ok();
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names = builtin_names();
  std::lock_guard<std::mutex> lock(plugins().mu);
  for (const auto& kv : plugins().by_name) names.push_back(kv.first);
  return names;
}

Expected<std::string> load_optimizer_plugin(const std::string& path) {
  if (is_python_plugin(path)) {  // a Python file: its mosaic.Optimizer classes (core/python_host.hpp)
    MOSAIC_ASSIGN_OR_RETURN(auto names, run_python_plugin(path, "optimizers"));
    return names.front();
  }
  // Kept loaded for the life of the process: optimizers it creates point into it.
  // A path without a slash is a file here, not a name for the library search path.
  const std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return Status::io_error("optimizer plugin " + path + ": cannot load: " + (why ? why : "unknown error"));
  }
  auto version = reinterpret_cast<int (*)()>(dlsym(lib, "mosaic_optimizer_api_version"));
  auto name_fn = reinterpret_cast<const char* (*)()>(dlsym(lib, "mosaic_optimizer_plugin_name"));
  auto create = reinterpret_cast<Optimizer* (*)(const OptimizerConfig*)>(dlsym(lib, "mosaic_create_optimizer"));
  if (!version || !name_fn || !create) {
    dlclose(lib);
    return Status::invalid("optimizer plugin " + path +
                           ": not a Mosaic optimizer plugin (no MOSAIC_OPTIMIZER_PLUGIN exports)");
  }
  const int v = version();
  if (v != MOSAIC_OPTIMIZER_API_VERSION) {
    dlclose(lib);
    return Status::invalid("optimizer plugin " + path + " was built against optimizer interface version " +
                           std::to_string(v) + ", this Mosaic has version " +
                           std::to_string(MOSAIC_OPTIMIZER_API_VERSION) + "; rebuild it against this Mosaic's headers");
  }
  const std::string name = name_fn() ? name_fn() : "";
  if (name.empty()) return Status::invalid("optimizer plugin " + path + ": empty optimizer name");
  OptimizerFactory factory = [create](const OptimizerConfig& c) { return std::unique_ptr<Optimizer>(create(&c)); };
  Status st = register_optimizer(name, std::move(factory), path);
  if (!st.is_ok()) return Status::invalid("optimizer plugin " + st.message());
  return name;
}

Status register_optimizer(const std::string& name, OptimizerFactory factory, const std::string& origin,
                          bool replace) {
  if (name.empty()) return Status::invalid(origin + ": empty optimizer name");
  if (!factory) return Status::invalid(origin + ": no factory for optimizer '" + name + "'");
  const auto builtins = builtin_names();
  if (std::find(builtins.begin(), builtins.end(), name) != builtins.end())
    return Status::invalid(origin + ": name '" + name + "' is a built-in optimizer's");
  std::lock_guard<std::mutex> lock(plugins().mu);
  auto it = plugins().by_name.find(name);
  if (it != plugins().by_name.end() && it->second.second != origin && !replace)
    return Status::invalid(origin + ": '" + name + "' is already provided by " + it->second.second);
  plugins().by_name[name] = {std::move(factory), origin};
  return Status::ok();
}

Status check_hyperparameters(const std::string& name, const OptimizerConfig& c) {
  // Written so that NaN fails every test (a comparison with NaN is false).
  auto in = [&](const char* key, double v, double lo, double hi, bool hi_open, const char* range) -> Status {
    if (std::isfinite(v) && v >= lo && (hi_open ? v < hi : v <= hi)) return Status::ok();
    std::ostringstream os;
    os << "optimizer " << name << ": " << key << " " << v << " is outside " << range;
    return Status::invalid(os.str());
  };
  const double inf = std::numeric_limits<double>::infinity();
  MOSAIC_RETURN_IF_ERROR(in("lr", c.lr, std::numeric_limits<double>::min(), inf, true, "(0, inf) (the learning rate must be positive)"));
  MOSAIC_RETURN_IF_ERROR(in("momentum", c.momentum, 0, 1, true, "[0, 1)"));
  MOSAIC_RETURN_IF_ERROR(in("dampening", c.dampening, 0, 1, false, "[0, 1]"));
  MOSAIC_RETURN_IF_ERROR(in("weight_decay", c.weight_decay, 0, inf, true, "[0, inf)"));
  MOSAIC_RETURN_IF_ERROR(in("beta1", c.beta1, 0, 1, true, "[0, 1)"));
  MOSAIC_RETURN_IF_ERROR(in("beta2", c.beta2, 0, 1, true, "[0, 1)"));
  if (c.eps >= 0 || !std::isfinite(c.eps)) MOSAIC_RETURN_IF_ERROR(in("eps", c.eps, 0, inf, true, "[0, inf)"));
  MOSAIC_RETURN_IF_ERROR(in("alpha", c.alpha, 0, 1, false, "[0, 1]"));
  MOSAIC_RETURN_IF_ERROR(in("lr_decay", c.lr_decay, 0, inf, true, "[0, inf)"));
  MOSAIC_RETURN_IF_ERROR(in("initial_accumulator_value", c.initial_accumulator_value, 0, inf, true, "[0, inf)"));
  for (const auto& [key, v] : c.extra)
    if (!std::isfinite(v)) return Status::invalid("optimizer " + name + ": " + key + " is not a finite number");
  return Status::ok();
}

Expected<std::unique_ptr<Optimizer>> make_optimizer(const std::string& name, const OptimizerConfig& config) {
  OptimizerConfig c = config;
  MOSAIC_RETURN_IF_ERROR(check_hyperparameters(name, c));
  std::unique_ptr<Optimizer> opt;
  if (name == "sgd") {
    opt.reset(new Sgd(c));
  } else if (name == "momentum" || name == "nesterov") {
    if (c.momentum == 0) c.momentum = 0.9;
    c.nesterov = name == "nesterov";
    opt.reset(new Sgd(c));
  } else if (name == "adam") {
    opt.reset(new Adam(c, false));
  } else if (name == "adamw") {
    if (config.weight_decay == 0) c.weight_decay = 0.01;  // PyTorch's AdamW default
    opt.reset(new Adam(c, true));
  } else if (name == "rmsprop") {
    opt.reset(new RmsProp(c));
  } else if (name == "adagrad") {
    opt.reset(new Adagrad(c));
  } else {
    OptimizerFactory create;
    {
      std::lock_guard<std::mutex> lock(plugins().mu);
      auto it = plugins().by_name.find(name);
      if (it != plugins().by_name.end()) create = it->second.first;
    }
    if (!create) {
      std::string known;
      for (const auto& n : optimizer_names()) known += (known.empty() ? "" : ", ") + n;
      return Status::invalid("unknown optimizer '" + name + "' (known: " + known +
                             "; user optimizers come from --optimizer-plugin)");
    }
    try {
      opt = create(c);
    } catch (const std::exception& e) {
      return Status::invalid("optimizer " + name + ": the plugin's constructor threw: " + e.what());
    }
    if (!opt) return Status::invalid("optimizer " + name + ": the plugin returned no optimizer");
  }
  MOSAIC_RETURN_IF_ERROR(check_extra_keys(*opt, c));
  return opt;
}

}  // namespace mosaic
