// A plugin that registers a kernel for an operator nobody defines (a typo of Swish).
#include "backends/plugin.hpp"

namespace {

class Nothing final : public mosaic::Kernel {
 public:
  mosaic::Status init(const mosaic::KernelContext&) { return mosaic::Status::ok(); }
  mosaic::Status forward(const std::vector<const mosaic::Tensor*>&, const std::vector<mosaic::Tensor*>&) override {
    return mosaic::Status::ok();
  }
};

mosaic::Status register_typo(mosaic::Registrar& r) {
  return mosaic::BackendRegistration::extend(r, "naive").kernel("Swsih", mosaic::make_factory<Nothing>()).status();
}

}  // namespace

MOSAIC_PLUGIN(register_typo)
