// Learning-rate schedules: a small extension point applied per epoch.
#pragma once

#include <memory>
#include <string>

#include "ir/status.hpp"

namespace mosaic {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  /// Learning rate for `epoch` (0-based) given the base rate.
  virtual double lr(double base, int64_t epoch) const = 0;
  /// Schedules that change the rate at every step say so; the trainer then asks
  /// lr_at_step before each step instead of lr once per epoch.
  virtual bool per_step() const { return false; }
  /// Learning rate for the step about to run (0-based) of a run of `total` steps.
  virtual double lr_at_step(double base, int64_t, int64_t) const { return base; }
};

/// "constant"; "step:N:GAMMA" (PyTorch StepLR: base * GAMMA^floor(epoch / N));
/// "cosine" (PyTorch CosineAnnealingLR, T_max = total epochs, eta_min = 0);
/// "warmup-linear:W" (per step, as transformers' get_linear_schedule_with_warmup, which
/// BERT uses: base * s / W for the first W steps, then base * (total - s) / (total - W)).
Expected<std::unique_ptr<LrSchedule>> make_schedule(const std::string& spec, int64_t total_epochs);

}  // namespace mosaic
