#include "core/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace mosaic {
namespace {

class Constant final : public LrSchedule {
 public:
  double lr(double base, int64_t) const override { return base; }
};

class Step final : public LrSchedule {
 public:
  Step(int64_t every, double gamma) : every_(every), gamma_(gamma) {}
  double lr(double base, int64_t epoch) const override {
    return base * std::pow(gamma_, static_cast<double>(epoch / every_));
  }

 private:
  int64_t every_;
  double gamma_;
};

class Cosine final : public LrSchedule {
 public:
  explicit Cosine(int64_t total) : total_(total) {}
  double lr(double base, int64_t epoch) const override {
    return base * (1 + std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(total_))) / 2;
  }

 private:
  int64_t total_;
};

class WarmupLinear final : public LrSchedule {
 public:
  explicit WarmupLinear(int64_t warmup) : warmup_(warmup) {}
  double lr(double base, int64_t) const override { return base; }
  bool per_step() const override { return true; }
  double lr_at_step(double base, int64_t step, int64_t total) const override {
    if (step < warmup_) return base * static_cast<double>(step) / static_cast<double>(warmup_);
    if (total <= warmup_) return base;
    return base * std::max(0.0, static_cast<double>(total - step) / static_cast<double>(total - warmup_));
  }

 private:
  int64_t warmup_;
};

}  // namespace

Expected<std::unique_ptr<LrSchedule>> make_schedule(const std::string& spec, int64_t total_epochs) {
  if (spec.empty() || spec == "constant") return std::unique_ptr<LrSchedule>(new Constant());
  if (spec == "cosine") return std::unique_ptr<LrSchedule>(new Cosine(std::max<int64_t>(total_epochs, 1)));
  if (spec.rfind("step:", 0) == 0) {
    char* end = nullptr;
    const long long every = std::strtoll(spec.c_str() + 5, &end, 10);
    if (every > 0 && *end == ':') {
      char* end2 = nullptr;
      const double gamma = std::strtod(end + 1, &end2);
      if (*end2 == '\0' && gamma > 0) return std::unique_ptr<LrSchedule>(new Step(every, gamma));
    }
  }
  if (spec.rfind("warmup-linear:", 0) == 0) {
    char* end = nullptr;
    const long long warmup = std::strtoll(spec.c_str() + 14, &end, 10);
    if (spec.size() > 14 && *end == '\0' && warmup >= 0) return std::unique_ptr<LrSchedule>(new WarmupLinear(warmup));
  }
  return Status::invalid("--lr-schedule '" + spec + "': expected constant, cosine, step:EPOCHS:GAMMA or warmup-linear:STEPS");
}

}  // namespace mosaic
