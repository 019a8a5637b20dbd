// The simulated device (sim_device.hpp) as a plugin, for the CLI's device-placement tests:
// backend "devsim" on sim:0. MOSAIC_SIM_UNAVAILABLE=REASON registers it as unavailable here;
// MOSAIC_SIM_TIMED=1 gives it device-side timing (sim_device.hpp); MOSAIC_SIM_MEMORY=BYTES
// gives it that much memory; MOSAIC_SIM_RELU_NS and MOSAIC_SIM_COPY_NS set what a Relu and a
// copy take on its clock.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "backends/plugin.hpp"
#include "sim_device.hpp"

namespace {

mosaic::Status register_sim(mosaic::Registrar& registrar) {
  using namespace mosaic::sim;
  const char* timed = std::getenv("MOSAIC_SIM_TIMED");
  const char* memory = std::getenv("MOSAIC_SIM_MEMORY");
  const size_t limit = memory ? std::strtoull(memory, nullptr, 10) : SIZE_MAX;
  auto device = std::make_shared<SimDevice>(limit, timed && std::string(timed) == "1");
  if (const char* ns = std::getenv("MOSAIC_SIM_RELU_NS")) device->relu_ns = std::strtoll(ns, nullptr, 10);
  if (const char* ns = std::getenv("MOSAIC_SIM_COPY_NS")) device->copy_ns = std::strtoll(ns, nullptr, 10);
  const char* unavailable = std::getenv("MOSAIC_SIM_UNAVAILABLE");
  mosaic::BackendRegistration r(registrar, sim_backend_info(device, unavailable ? unavailable : ""));
  r.kernel("Relu", sim_factory<SimRelu>(device), sim_traits()).kernel("Add", sim_factory<SimAdd>(device), sim_traits());
  return r.status();
}

}  // namespace

MOSAIC_PLUGIN(register_sim)
