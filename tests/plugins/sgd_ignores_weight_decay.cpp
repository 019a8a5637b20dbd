// Planted bug: SGD that ignores weight decay. optcheck --reference sgd must FAIL.
#include "core/optimizer.hpp"

class SgdNoDecay final : public mosaic::Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "sgd_ignores_weight_decay"; }
  std::vector<std::string> state_names() const override {
    return config_.momentum != 0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{};
  }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& st, int64_t t) override {
    const double mu = config_.momentum;
    for (int64_t i = 0; i < n; ++i) {
      double d = g[i];  // bug: + weight_decay * p[i] is missing
      if (mu != 0) {
        st[0][i] = float(t == 1 ? d : mu * st[0][i] + (1 - config_.dampening) * d);
        d = config_.nesterov ? d + mu * st[0][i] : st[0][i];
      }
      p[i] = float(p[i] - config_.lr * d);
    }
  }
};

MOSAIC_OPTIMIZER_PLUGIN("sgd_ignores_weight_decay", SgdNoDecay)
