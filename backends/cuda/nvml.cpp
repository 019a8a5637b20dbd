// What cuda:0 says of itself through NVML (the driver's management library), loaded at run
// time so that neither the build nor a machine without the driver needs it: utilisation over
// the driver's last sample period, SM and memory clocks, power and temperature. The device is
// found by its PCI bus id (CUDA's device 0 need not be NVML's index 0). The few NVML entry
// points used are declared here from NVML's documented C interface.
#include <dlfcn.h>

#include <mutex>

#include "backends/cuda/cuda_backend.hpp"

namespace mosaic::cuda_backend {
namespace {

using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2;  // nvmlClockType_t
constexpr int kNvmlTemperatureGpu = 0;              // nvmlTemperatureSensors_t

struct Nvml {
  int (*init)() = nullptr;
  int (*by_pci)(const char*, NvmlDevice*) = nullptr;
  int (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*clock)(NvmlDevice, int, unsigned int*) = nullptr;
  int (*power)(NvmlDevice, unsigned int*) = nullptr;
  int (*temperature)(NvmlDevice, int, unsigned int*) = nullptr;
  NvmlDevice device = nullptr;
  bool ready = false;
};

template <class F>
bool bind(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  return *f != nullptr;
}

/// NVML bound to cuda:0, or not ready (no libnvidia-ml.so.1, no such device): asked once.
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    if (!bind(lib, "nvmlInit_v2", &n.init) || !bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", &n.by_pci) ||
        !bind(lib, "nvmlDeviceGetUtilizationRates", &n.utilization) || !bind(lib, "nvmlDeviceGetClockInfo", &n.clock) ||
        !bind(lib, "nvmlDeviceGetPowerUsage", &n.power) || !bind(lib, "nvmlDeviceGetTemperature", &n.temperature))
      return;
    char bus[32] = {};
    if (n.init() != kNvmlSuccess || cudaDeviceGetPCIBusId(bus, sizeof bus, 0) != cudaSuccess) return;
    n.ready = n.by_pci(bus, &n.device) == kNvmlSuccess;
  });
  return n;
}

}  // namespace

std::vector<std::pair<std::string, double>> CudaDevice::sample() {
  std::vector<std::pair<std::string, double>> out;
  if (!unavailable().empty()) return out;
  const Nvml& n = nvml();
  if (!n.ready) return out;
  NvmlUtilization u{};
  if (n.utilization(n.device, &u) == kNvmlSuccess) {
    out.emplace_back("gpu_utilization_pct", u.gpu);
    out.emplace_back("memory_utilization_pct", u.memory);
  }
  unsigned int v = 0;
  if (n.clock(n.device, kNvmlClockSm, &v) == kNvmlSuccess) out.emplace_back("sm_clock_mhz", v);
  if (n.clock(n.device, kNvmlClockMem, &v) == kNvmlSuccess) out.emplace_back("memory_clock_mhz", v);
  if (n.power(n.device, &v) == kNvmlSuccess) out.emplace_back("power_w", v / 1000.0);
  if (n.temperature(n.device, kNvmlTemperatureGpu, &v) == kNvmlSuccess) out.emplace_back("temperature_c", v);
  return out;
}

}  // namespace mosaic::cuda_backend
