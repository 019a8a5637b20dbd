// The simulated device's test cases (tests/plugins/sim_device.hpp): a registry with naive
// and the device's backend "devsim" (Relu, Add), and small graphs for it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/naive/naive.hpp"
#include "core/optimizer.hpp"
#include "plugins/sim_device.hpp"
#include "test_util.hpp"

namespace mosaic::test {

struct SimRegistry {
  explicit SimRegistry(size_t limit = SIZE_MAX, std::string unavailable = "", bool timed = false, bool trains = true)
      : device(std::make_shared<sim::SimDevice>(limit, timed, trains)) {
    EXPECT_TRUE(register_backend(registry, register_naive).is_ok());
    DirectRegistrar direct(registry);
    BackendRegistration r(direct, sim::sim_backend_info(device, unavailable));
    r.kernel("Relu", sim::sim_factory<sim::SimRelu>(device), sim::sim_traits())
        .kernel("Add", sim::sim_factory<sim::SimAdd>(device), sim::sim_traits());
    EXPECT_TRUE(r.status().is_ok()) << r.status().to_string();
  }
  KernelRegistry registry;
  std::shared_ptr<sim::SimDevice> device;
};

/// x -> relu1 -> add1 (+ the constant w) -> tanh1 (no devsim kernel: naive) -> relu2 -> y.
inline Graph sim_graph() {
  Graph g;
  g.source = "sim.onnx";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3}, {}, true});
  g.initializers["w"] = Tensor::from_f32({2, 3}, {0.5f, -1.f, 2.f, -0.25f, 1.5f, -3.f});
  add_node(g, make_node("Relu"), {"x"}, {"h1"}, "relu1");
  add_node(g, make_node("Add"), {"h1", "w"}, {"h2"}, "add1");
  add_node(g, make_node("Tanh"), {"h2"}, {"h3"}, "tanh1");
  add_node(g, make_node("Relu"), {"h3"}, {"y"}, "relu2");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

/// x -> relu1 -> add1 (+ w) -> add2 (+ h1) -> tanh1 (naive) -> relu2 -> y: w read on the device
/// only, h1 by two nodes.
inline Graph sim_training_graph() {
  Graph g = sim_graph();
  g.nodes.clear();
  add_node(g, make_node("Relu"), {"x"}, {"h1"}, "relu1");
  add_node(g, make_node("Add"), {"h1", "w"}, {"h2"}, "add1");
  add_node(g, make_node("Add"), {"h2", "h1"}, {"h3"}, "add2");
  add_node(g, make_node("Tanh"), {"h3"}, {"h4"}, "tanh1");
  add_node(g, make_node("Relu"), {"h4"}, {"y"}, "relu2");
  return g;
}

/// An input for sim_training_graph() and a gradient for its output.
inline Tensor sim_training_x() { return Tensor::from_f32({2, 3}, {-1.f, 0.5f, 2.f, -0.3f, 0.1f, 1.f}); }
inline Tensor sim_training_dy() { return Tensor::from_f32({2, 3}, {1.f, -2.f, 0.5f, 3.f, -1.f, 0.25f}); }

/// One training step: forward on x, backward from dy, the optimizer's step.
inline void train_step(Plan& plan, Optimizer& optimizer, const Tensor& x, const Tensor& dy) {
  std::vector<Tensor> out;
  ASSERT_TRUE(plan.run({x}, &out).is_ok());
  ASSERT_TRUE(plan.backward({dy}).is_ok());
  const Status st = plan.optimizer_step(optimizer);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
}

/// One run of `plan` on x: its first output, read on the host.
inline std::vector<float> run_plan(Plan& plan, const Tensor& x, ExecObserver* observer = nullptr) {
  std::vector<Tensor> out;
  const Status st = plan.run({x}, &out, observer);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (out.empty()) return {};
  EXPECT_EQ(out[0].device(), nullptr) << "outputs come back to the host";
  return std::vector<float>(out[0].f32(), out[0].f32() + out[0].numel());
}

}  // namespace mosaic::test
