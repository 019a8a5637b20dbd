// Learning-rate schedules: a small extension point applied per epoch.
#pragma once

#include <memory>
#include <string>

#include "core/status.hpp"

namespace mosaic {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  /// Learning rate for `epoch` (0-based) given the base rate.
  virtual double lr(double base, int64_t epoch) const = 0;
};

/// "constant"; "step:N:GAMMA" (PyTorch StepLR: base * GAMMA^floor(epoch / N));
/// "cosine" (PyTorch CosineAnnealingLR, T_max = total epochs, eta_min = 0).
Expected<std::unique_ptr<LrSchedule>> make_schedule(const std::string& spec, int64_t total_epochs);

}  // namespace mosaic
