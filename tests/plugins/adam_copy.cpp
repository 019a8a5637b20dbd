// Test plugin: a correct user re-implementation of Adam (it must PASS optcheck --reference adam).
#include <cmath>

#include "core/optimizer.hpp"

class AdamCopy : public mosaic::Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "adam_copy"; }
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 protected:
  virtual double second_moment_beta() const { return config_.beta2; }
  virtual double decay() const { return config_.weight_decay; }
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    const double b1 = config_.beta1, b2 = second_moment_beta(), eps = config_.eps < 0 ? 1e-8 : config_.eps;
    const double c1 = 1 - std::pow(config_.beta1, double(t)), c2 = 1 - std::pow(config_.beta2, double(t));
    for (int64_t i = 0; i < n; ++i) {
      const double d = g[i] + decay() * p[i];
      st[0][i] = float(b1 * st[0][i] + (1 - b1) * d);
      st[1][i] = float(b2 * st[1][i] + (1 - b2) * d * d);
      p[i] = float(p[i] - config_.lr * (st[0][i] / c1) / (std::sqrt(st[1][i] / c2) + eps));
    }
  }
};

#ifndef MOSAIC_TEST_NO_EXPORT
MOSAIC_OPTIMIZER_PLUGIN("adam_copy", AdamCopy)
#endif
