#include "ir/device.hpp"

#include "ir/tensor.hpp"

namespace mosaic {

Expected<std::shared_ptr<Buffer>> device_buffer(const std::shared_ptr<Device>& device, size_t bytes,
                                                MemoryTracker* tracker) {
  auto data = device->allocate(bytes);
  if (!data.ok()) return data.status();
  return std::make_shared<Buffer>(device, data.value(), bytes, tracker);
}

}  // namespace mosaic
