// A test operator whose time is known: com.mosaic.test.Wait copies its float32 input to its
// output after waiting `ms` + `per_sample_ms` x (the input's first dimension) milliseconds,
// asleep (`spin` 0) or spinning on a core (`spin` 1). Models made of it have a service time
// the test can compute with, for the serving scenarios (tests/test_loadgen.cpp).
#include <chrono>
#include <cstring>
#include <thread>

#include "backends/plugin.hpp"

namespace {

using mosaic::Status;

mosaic::Expected<std::vector<mosaic::TensorDesc>> infer_wait(const mosaic::OpContext& ctx) {
  if (ctx.inputs[0].dtype != mosaic::DType::kF32) return Status::invalid(ctx.node->label() + ": Wait takes float32");
  return std::vector<mosaic::TensorDesc>{ctx.inputs[0]};
}

double no_flops(const mosaic::OpContext&) { return 0; }  // it only waits

class Wait final : public mosaic::Kernel {
 public:
  Status init(const mosaic::KernelContext& ctx) {
    const double rows = ctx.inputs[0].shape.empty() ? 1.0 : static_cast<double>(ctx.inputs[0].shape[0]);
    wait_ms_ = ctx.node->attr_float("ms", 0.f) + ctx.node->attr_float("per_sample_ms", 0.f) * rows;
    spin_ = ctx.node->attr_int("spin", 0) != 0;
    return Status::ok();
  }
  Status forward(const std::vector<const mosaic::Tensor*>& src, const std::vector<mosaic::Tensor*>& dst) override {
    using Clock = std::chrono::steady_clock;
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double, std::milli>(wait_ms_));
    if (spin_)
      while (Clock::now() < until) {
      }
    else
      std::this_thread::sleep_until(until);
    std::memcpy(dst[0]->data(), src[0]->data(), src[0]->bytes());
    return Status::ok();
  }

 private:
  double wait_ms_ = 0;
  bool spin_ = false;
};

Status register_wait(mosaic::Registrar& r) {
  mosaic::OpSchema s;
  s.op_type = "Wait";
  s.domain = "com.mosaic.test";
  s.infer = infer_wait;
  s.flops = no_flops;
  s.summary = "waits a given time, then copies (test plugin)";
  MOSAIC_RETURN_IF_ERROR(r.add_operator(std::move(s)));
  return mosaic::BackendRegistration::extend(r, "naive").kernel("Wait", mosaic::make_factory<Wait>()).status();
}

}  // namespace

MOSAIC_PLUGIN(register_wait)
