// A plugin that claims another interface version: Mosaic must refuse to load it.
#include "core/optimizer.hpp"

class Old final : public mosaic::Optimizer {
 public:
  using Optimizer::Optimizer;
  std::string name() const override { return "old"; }
  std::vector<std::string> state_names() const override { return {}; }

 protected:
  void update(float* p, const float* g, int64_t n, std::vector<std::vector<float>>&, int64_t) override {
    for (int64_t i = 0; i < n; ++i) p[i] -= float(config_.lr) * g[i];
  }
};

extern "C" int mosaic_optimizer_api_version() { return MOSAIC_OPTIMIZER_API_VERSION + 1000; }
extern "C" const char* mosaic_optimizer_plugin_name() { return "old"; }
extern "C" mosaic::Optimizer* mosaic_create_optimizer(const mosaic::OptimizerConfig* c) { return new Old(*c); }
