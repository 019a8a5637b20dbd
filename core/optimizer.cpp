#include "core/optimizer.hpp"

#include <cmath>

namespace mosaic {

Status Optimizer::step(std::vector<ParamRef>& params) {
  if (state_.empty()) state_.resize(params.size());
  if (state_.size() != params.size()) return Status::invalid(name() + ": the parameter list changed between steps");
  ++steps_;
  for (size_t i = 0; i < params.size(); ++i) {
    ParamRef& p = params[i];
    if (!p.grad.defined() || p.grad.numel() != p.value.numel())
      return Status::invalid(name() + ": parameter '" + p.name + "' has no gradient of its size");
    update(p.value.f32(), p.grad.f32(), p.value.numel(), state_[i], steps_);
  }
  return Status::ok();
}

namespace {

double eps_or(const OptimizerConfig& c, double def) { return c.eps < 0 ? def : c.eps; }

/// PyTorch SGD: g += wd p; b = mu b + (1 - dampening) g (b = g on the first step);
/// g = nesterov ? g + mu b : b; p -= lr g.
class Sgd final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "sgd"; }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    const double lr = config_.lr, wd = config_.weight_decay, mu = config_.momentum, damp = config_.dampening;
    if (mu != 0 && st.empty()) st.emplace_back(static_cast<size_t>(n), 0.f);
    for (int64_t i = 0; i < n; ++i) {
      double d = g[i] + wd * p[i];
      if (mu != 0) {
        float& b = st[0][i];
        b = static_cast<float>(t == 1 ? d : mu * b + (1 - damp) * d);
        d = config_.nesterov ? d + mu * b : b;
      }
      p[i] = static_cast<float>(p[i] - lr * d);
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

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    if (st.empty()) {
      st.emplace_back(static_cast<size_t>(n), 0.f);
      st.emplace_back(static_cast<size_t>(n), 0.f);
    }
    const double lr = config_.lr, wd = config_.weight_decay, b1 = config_.beta1, b2 = config_.beta2;
    const double eps = eps_or(config_, 1e-8);
    const double bc1 = 1 - std::pow(b1, static_cast<double>(t)), bc2 = 1 - std::pow(b2, static_cast<double>(t));
    const double step = lr / bc1, bc2_sqrt = std::sqrt(bc2);
    for (int64_t i = 0; i < n; ++i) {
      double pi = p[i], d = g[i];
      if (decoupled_) pi *= 1 - lr * wd;
      else d += wd * pi;
      float& m = st[0][i];
      float& v = st[1][i];
      m = static_cast<float>(b1 * m + (1 - b1) * d);
      v = static_cast<float>(b2 * v + (1 - b2) * d * d);
      p[i] = static_cast<float>(pi - step * m / (std::sqrt(static_cast<double>(v)) / bc2_sqrt + eps));
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

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t) override {
    if (st.empty()) {
      st.emplace_back(static_cast<size_t>(n), 0.f);
      if (config_.momentum != 0) st.emplace_back(static_cast<size_t>(n), 0.f);
    }
    const double lr = config_.lr, wd = config_.weight_decay, a = config_.alpha, mu = config_.momentum;
    const double eps = eps_or(config_, 1e-8);
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + wd * p[i];
      float& v = st[0][i];
      v = static_cast<float>(a * v + (1 - a) * d * d);
      const double upd = d / (std::sqrt(static_cast<double>(v)) + eps);
      if (mu != 0) {
        float& b = st[1][i];
        b = static_cast<float>(mu * b + upd);
        p[i] = static_cast<float>(p[i] - lr * b);
      } else {
        p[i] = static_cast<float>(p[i] - lr * upd);
      }
    }
  }
};

/// PyTorch Adagrad: clr = lr / (1 + (t - 1) lr_decay); s += g^2; p -= clr g / (sqrt(s) + eps).
class Adagrad final : public Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "adagrad"; }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    if (st.empty()) st.emplace_back(static_cast<size_t>(n), static_cast<float>(config_.initial_accumulator_value));
    const double wd = config_.weight_decay, eps = eps_or(config_, 1e-10);
    const double clr = config_.lr / (1 + static_cast<double>(t - 1) * config_.lr_decay);
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + wd * p[i];
      float& s = st[0][i];
      s = static_cast<float>(s + d * d);
      p[i] = static_cast<float>(p[i] - clr * d / (std::sqrt(static_cast<double>(s)) + eps));
    }
  }
};

}  // namespace

std::vector<std::string> optimizer_names() { return {"sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop", "adagrad"}; }

Expected<std::unique_ptr<Optimizer>> make_optimizer(const std::string& name, const OptimizerConfig& config) {
  OptimizerConfig c = config;
  if (c.lr <= 0) return Status::invalid("optimizer " + name + ": learning rate must be positive");
  if (name == "sgd") return std::unique_ptr<Optimizer>(new Sgd(c));
  if (name == "momentum" || name == "nesterov") {
    if (c.momentum == 0) c.momentum = 0.9;
    c.nesterov = name == "nesterov";
    return std::unique_ptr<Optimizer>(new Sgd(c));
  }
  if (name == "adam") return std::unique_ptr<Optimizer>(new Adam(c, false));
  if (name == "adamw") {
    if (config.weight_decay == 0) c.weight_decay = 0.01;  // PyTorch's AdamW default
    return std::unique_ptr<Optimizer>(new Adam(c, true));
  }
  if (name == "rmsprop") return std::unique_ptr<Optimizer>(new RmsProp(c));
  if (name == "adagrad") return std::unique_ptr<Optimizer>(new Adagrad(c));
  std::string known;
  for (const auto& n : optimizer_names()) known += (known.empty() ? "" : ", ") + n;
  return Status::invalid("unknown optimizer '" + name + "' (known: " + known + ")");
}

}  // namespace mosaic
