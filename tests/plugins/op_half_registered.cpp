// A plugin whose registration fails half-way: a new backend and a kernel go in, then it
// registers a backend named like a built-in. Nothing of it may remain registered.
#include "backends/plugin.hpp"

namespace {

class Copy final : public mosaic::Kernel {
 public:
  mosaic::Status init(const mosaic::KernelContext&) { return mosaic::Status::ok(); }
  mosaic::Status forward(const std::vector<const mosaic::Tensor*>& src, const std::vector<mosaic::Tensor*>& dst) override {
    for (int64_t i = 0, n = src[0]->numel(); i < n; ++i) dst[0]->f32()[i] = src[0]->f32()[i];
    return mosaic::Status::ok();
  }
};

mosaic::Status register_half(mosaic::Registrar& registrar) {
  mosaic::BackendRegistration half(registrar, {"half-registered", "first half of a failing plugin", nullptr, nullptr});
  MOSAIC_RETURN_IF_ERROR(half.kernel("Identity", mosaic::make_factory<Copy>()).status());
  return mosaic::BackendRegistration(registrar, {"naive", "a second naive", nullptr, nullptr}).status();
}

}  // namespace

MOSAIC_PLUGIN(register_half)
