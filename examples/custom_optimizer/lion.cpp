// A user optimizer as a Mosaic plugin: Lion (Chen et al., "Symbolic Discovery of
// Optimization Algorithms", 2023). Build with mosaic_add_optimizer_plugin (see
// CMakeLists.txt here), then:
//   mosaic optcheck --optimizer-plugin build/examples/custom_optimizer/libmosaic_lion.so --lr 0.001
//   mosaic train zoo:fmnist-cnn --optimizer-plugin .../libmosaic_lion.so --lr 1e-4 --opt b2=0.99
//
// Rule: c = b1 m + (1 - b1) g;  p -= lr (sign(c) + wd p);  m = b2 m + (1 - b2) g.
#include <cmath>

#include "core/optimizer.hpp"

namespace {

class Lion final : public mosaic::Optimizer {
 public:
  explicit Lion(const mosaic::OptimizerConfig& c)
      : Optimizer(c), b1_(c.get("b1", 0.9)), b2_(c.get("b2", 0.99)) {}

  std::string name() const override { return "lion"; }
  // One buffer per parameter: the momentum (PyTorch implementations call it exp_avg).
  std::vector<std::string> state_names() const override { return {"exp_avg"}; }
  // Hyperparameters beyond OptimizerConfig's fields, given as --opt b1=0.95,b2=0.98.
  std::vector<std::string> extra_keys() const override { return {"b1", "b2"}; }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>& state, int64_t) override {
    float* m = state[0].data();
    const double lr = config_.lr, wd = config_.weight_decay;
    for (int64_t i = 0; i < n; ++i) {
      const double c = b1_ * m[i] + (1 - b1_) * g[i];
      const double sign = c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0;
      p[i] = static_cast<float>(p[i] - lr * (sign + wd * p[i]));
      m[i] = static_cast<float>(b2_ * m[i] + (1 - b2_) * g[i]);
    }
  }

 private:
  double b1_, b2_;
};

}  // namespace

MOSAIC_OPTIMIZER_PLUGIN("lion", Lion)
