// The simulated device (sim_device.hpp) as a plugin, for the CLI's device-placement tests:
// backend "devsim" on sim:0. MOSAIC_SIM_UNAVAILABLE=REASON registers it as unavailable here.
#include <cstdlib>

#include "backends/plugin.hpp"
#include "sim_device.hpp"

namespace {

mosaic::Status register_sim(mosaic::PluginRegistrar& r) {
  using namespace mosaic::sim;
  auto device = std::make_shared<SimDevice>();
  const char* unavailable = std::getenv("MOSAIC_SIM_UNAVAILABLE");
  MOSAIC_RETURN_IF_ERROR(r.add_backend(sim_backend_info(device, unavailable ? unavailable : "")));
  MOSAIC_RETURN_IF_ERROR(r.add_kernel("devsim", "Relu", sim_factory<SimRelu>(device), sim_traits()));
  return r.add_kernel("devsim", "Add", sim_factory<SimAdd>(device), sim_traits());
}

}  // namespace

MOSAIC_PLUGIN(register_sim)
