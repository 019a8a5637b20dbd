// Device placement (ir/device.hpp, BackendInfo::device) on a simulated device whose memory
// stores every word with its sign flipped (tests/plugins/sim_device.hpp): a missing or
// misplaced copy computes with negated values and fails the comparison with naive.
#include <cmath>
#include <set>

#include "backends/naive/naive.hpp"
#include "sim_cases.hpp"
#include "core/optimizer.hpp"
#include "test_util.hpp"
#include "validate/planted_bugs.hpp"

namespace mosaic::test {
namespace {

using sim::SimDevice;

/// sim_graph() prepared for `sim`'s registry, an input, and naive's output for it (empty
/// where something failed, with the failure reported).
struct SimCase {
  Graph g = sim_graph();
  Tensor x = Tensor::from_f32({2, 3}, {-1.f, 0.5f, 2.f, -0.3f, 0.f, 1.f});
  std::vector<float> expected;
};
SimCase sim_case(SimRegistry& sim) {
  SimCase c;
  const auto prepared = prepare_graph(c.g, sim.registry, PrepareOptions{});
  EXPECT_TRUE(prepared.ok()) << prepared.status().to_string();
  auto naive = Plan::build(c.g, Placement::all_on("naive"), sim.registry);
  EXPECT_TRUE(naive.ok()) << naive.status().to_string();
  if (prepared.ok() && naive.ok()) c.expected = run_plan(*naive.value(), c.x);
  return c;
}

/// `got` is naive's output for the case.
void expect_naives(const std::vector<float>& got, const SimCase& c) {
  ASSERT_EQ(got.size(), c.expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], c.expected[i]) << i;
}

struct CountingObserver : ExecObserver {
  void on_node(const NodeEvent&) override { ++nodes; }
  void on_run(const RunEvent&) override { ++runs; }
  int nodes = 0, runs = 0;
};

TEST(DevicePlans, CopiesAreTimedStepsAndTheResultIsNaives) {
  SimRegistry sim;
  const SimCase c = sim_case(sim);
  ASSERT_EQ(c.expected.size(), 6u);
  {
    auto plan = Plan::build(c.g, Placement::all_on("devsim"), sim.registry);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    const Plan& p = *plan.value();
    std::vector<std::string> steps;
    for (const auto& s : p.steps()) steps.push_back(p.node(s).op_type + "@" + s.backend + (s.device ? ":dev" : ""));
    // The constant w is resident (no step); tanh1 falls back to naive on the host.
    const std::vector<std::string> want = {"mosaic.ToDevice@devsim:dev", "Relu@devsim:dev",  "Add@devsim:dev",
                                           "mosaic.ToHost@devsim:dev",   "Tanh@naive",       "mosaic.ToDevice@devsim:dev",
                                           "Relu@devsim:dev",            "mosaic.ToHost@devsim:dev"};
    EXPECT_EQ(steps, want) << join(steps);
    EXPECT_EQ(p.conversion_count(), 4);
    ASSERT_EQ(p.device_bytes().count("sim:0"), 1u);
    EXPECT_EQ(p.device_bytes().at("sim:0").constants, 24) << "w, once";
    EXPECT_GE(p.device_bytes().at("sim:0").activations, 24);
    EXPECT_EQ(p.device_bytes().at("sim:0").workspace, static_cast<int64_t>(2 * sim::kReluWorkspaceBytes))
        << "the two Relus' device scratch, under the device";
    EXPECT_EQ(p.workspace_bytes(), 0) << "and not under the host's";
    EXPECT_TRUE(p.steps()[4].fell_back());

    CountingObserver observer;
    const int syncs = sim.device->syncs;
    const std::vector<float> got = run_plan(*plan.value(), c.x, &observer);
    expect_naives(got, c);
    EXPECT_EQ(observer.nodes, 8) << "every copy is a timed step";
    EXPECT_EQ(sim.device->syncs - syncs, 8) << "each of the 7 device steps waits for the device, and the run's end";
    EXPECT_EQ(sim.device->copies_in, 1 + 2) << "w at build time, then x and h3 per run";
    EXPECT_EQ(sim.device->copies_out, 2);
    run_plan(*plan.value(), c.x);
    EXPECT_EQ(sim.device->copies_in, 1 + 4) << "w is not copied again";
  }
  EXPECT_EQ(sim.device->live_allocations(), 0u) << "the plan's device memory is released with it";
}

/// Every node event of a run: (step, duration in ns).
struct RecordingObserver : ExecObserver {
  void on_node(const NodeEvent& e) override { events.emplace_back(e.step, e.end_ns - e.begin_ns); }
  void on_run(const RunEvent&) override { ++runs; }
  std::vector<std::pair<int, int64_t>> events;
  int runs = 0;
};

TEST(DevicePlans, ADeviceWithTimingTimesItsStepsByMarkersAndWaitsOnce) {
  SimRegistry sim(SIZE_MAX, "", true);
  const SimCase c = sim_case(sim);
  ASSERT_EQ(c.expected.size(), 6u);
  auto plan = Plan::build(c.g, Placement::all_on("devsim"), sim.registry);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const Plan& p = *plan.value();
  RecordingObserver observer;
  const int syncs = sim.device->syncs, marks = sim.device->marks;
  const std::vector<float> got = run_plan(*plan.value(), c.x, &observer);
  expect_naives(got, c);
  EXPECT_EQ(sim.device->syncs - syncs, 1) << "one wait, at the run's end: none per step";
  EXPECT_EQ(sim.device->marks - marks, 2 * 7) << "a marker before and after each of the 7 device steps";
  ASSERT_EQ(observer.events.size(), 8u);
  EXPECT_EQ(observer.runs, 1);
  // Each device step takes exactly the device's time for its work (the sim's clock moves only
  // with it), which a host clock around the step would not give; the host step (Tanh on naive)
  // is timed on the host.
  for (const auto& [step, ns] : observer.events) {
    const PlanStep& s = p.steps()[step];
    const std::string& op = p.node(s).op_type;
    if (!s.device) {
      EXPECT_EQ(op, "Tanh");
      continue;
    }
    const int64_t want = op == "Relu" ? sim::kReluNs : op == "Add" ? sim::kAddNs : sim::kCopyNs;
    EXPECT_EQ(ns, want) << op << " (step " << step << ")";
  }
}

TEST(DevicePlans, MixedPlacementCopiesOnlyAtTheBoundaries) {
  SimRegistry sim;
  Graph g = sim_graph();
  ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
  auto placement = Placement::parse("Add=devsim,*=naive", sim.registry);
  ASSERT_TRUE(placement.ok());
  auto plan = Plan::build(g, placement.value(), sim.registry);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<std::string> ops;
  for (const auto& s : plan.value()->steps()) ops.push_back(plan.value()->node(s).op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"Relu", "mosaic.ToDevice", "Add", "mosaic.ToHost", "Tanh", "Relu"}));
  const Tensor x = Tensor::from_f32({2, 3}, {1.f, -2.f, 0.25f, 3.f, -0.5f, 0.f});
  const std::vector<float> got = run_plan(*plan.value(), x);
  const std::vector<float> w = {0.5f, -1.f, 2.f, -0.25f, 1.5f, -3.f};
  ASSERT_EQ(got.size(), 6u);
  for (size_t i = 0; i < 6; ++i)  // relu(tanh(relu(x) + w)), by hand
    EXPECT_FLOAT_EQ(got[i], std::max(0.f, std::tanh(std::max(0.f, x.f32()[i]) + w[i]))) << i;
}

// An input that only the copy to the device reads goes from the caller's tensor to the device
// (on a GPU: no host copy of the batch per run); one a host kernel also reads is copied into
// the plan first, as every input of a host plan is.
TEST(DevicePlans, AnInputOnlyADeviceReadsIsCopiedFromTheCallersTensor) {
  const Tensor x2 = Tensor::from_f32({2, 3}, {2.f, -1.f, 0.75f, 1.f, -4.f, 3.f});
  for (const char* spec : {"*=devsim", "Relu=naive,*=devsim"}) {
    SCOPED_TRACE(spec);
    SimRegistry sim;  // a device of its own: what it was copied from is this placement's
    SimCase c = sim_case(sim);
    auto naive = Plan::build(c.g, Placement::all_on("naive"), sim.registry);
    ASSERT_TRUE(naive.ok());
    const std::vector<float> want2 = run_plan(*naive.value(), x2);
    auto placement = Placement::parse(spec, sim.registry);
    ASSERT_TRUE(placement.ok());
    auto plan = Plan::build(c.g, placement.value(), sim.registry);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    const bool device_reads_x = std::string(spec) == "*=devsim";
    EXPECT_EQ(plan.value()->node(plan.value()->steps()[0]).op_type,
              device_reads_x ? "mosaic.ToDevice" : "Relu");
    expect_naives(run_plan(*plan.value(), c.x), c);
    const int copies = sim.device->copies_in;
    const std::vector<float> got2 = run_plan(*plan.value(), x2);  // a second input: not a stale one
    ASSERT_EQ(got2.size(), want2.size());
    for (size_t i = 0; i < got2.size(); ++i) EXPECT_FLOAT_EQ(got2[i], want2[i]) << i;
    EXPECT_EQ(sim.device->copies_in - copies, device_reads_x ? 2 : 1) << "x and h3, or h1 alone";
    EXPECT_EQ(sim.device->copied_from(x2.data()), device_reads_x)
        << "the copy reads the caller's tensor, or a host kernel reads x from the plan's buffer";
    for (const auto& v : plan.value()->values()) {  // the plan holds a host buffer for x only where it reads it
      if (v.is_input) {
        EXPECT_EQ(v.tensor.data() == nullptr, device_reads_x) << v.name;
      }
    }
    // bench page-locks such an input while it times the plan, and unlocks it after.
    const std::vector<Tensor> inputs = {x2};
    {
      const PinnedHost pinned = plan.value()->pin_inputs(inputs);
      EXPECT_EQ(pinned.bytes(), device_reads_x ? 24u : 0u);
      EXPECT_EQ(sim.device->pinned_bytes(), device_reads_x ? 24u : 0u);
      const std::vector<float> got3 = run_plan(*plan.value(), inputs[0]);
      ASSERT_EQ(got3.size(), want2.size());
      for (size_t i = 0; i < got3.size(); ++i) EXPECT_FLOAT_EQ(got3[i], want2[i]) << i;
    }
    EXPECT_EQ(sim.device->pinned_bytes(), 0u) << "unpinned when the PinnedHost goes";
  }
}

TEST(DevicePlans, DeviceTensorsAreCopiedOutByClone) {
  auto device = std::make_shared<SimDevice>();
  auto buffer = device_buffer(device, 8, nullptr);
  ASSERT_TRUE(buffer.ok());
  const float values[2] = {1.5f, -2.f};
  ASSERT_TRUE(device->copy_to_device(buffer.value()->data(), values, 8).is_ok());
  const Tensor on_device = Tensor::on_buffer(TensorDesc{DType::kF32, {2}}, buffer.value());
  EXPECT_EQ(on_device.device(), device.get());
  EXPECT_NE(on_device.f32()[0], 1.5f) << "the device stores its words its own way";
  const Tensor host = on_device.clone();
  EXPECT_EQ(host.device(), nullptr);
  EXPECT_EQ(host.f32()[0], 1.5f);
  EXPECT_EQ(host.f32()[1], -2.f);
}

TEST(DevicePlans, OutOfDeviceMemoryIsAnErrorNamingTheBytes) {
  SimRegistry sim(/*limit=*/40);  // w (24 bytes) fits, w and an activation buffer do not
  Graph g = sim_graph();
  ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
  auto plan = Plan::build(g, Placement::all_on("devsim"), sim.registry);
  ASSERT_FALSE(plan.ok());
  const std::string m = plan.status().message();
  EXPECT_NE(m.find("sim.onnx"), std::string::npos) << m;
  EXPECT_NE(m.find("24 bytes asked for"), std::string::npos) << m;
  EXPECT_NE(m.find("sim:0"), std::string::npos) << m;
  // The buffer's first value, the node that writes it, and how many more share it.
  EXPECT_NE(m.find("activation buffer of 24 bytes on sim:0 for 'h2' (the output of node 'add1' (Add)) and 2 more "
                   "values sharing it"),
            std::string::npos)
      << m;
  EXPECT_EQ(sim.device->live_allocations(), 0u) << "nothing is left allocated";
  PlanOptions unallocated;
  unallocated.allocate = false;  // `mosaic plan` and `info` size the plan without allocating
  auto sized = Plan::build(g, Placement::all_on("devsim"), sim.registry, unallocated);
  ASSERT_TRUE(sized.ok()) << sized.status().to_string();
  EXPECT_EQ(sized.value()->device_bytes().at("sim:0").constants, 24);
}

TEST(DevicePlans, TrainingOnADeviceThatCannotKeepGradientsIsRefusedWithTheReason) {
  SimRegistry sim(SIZE_MAX, "", false, /*trains=*/false);
  Graph g = sim_graph();
  ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
  PlanOptions training;
  training.training = true;
  auto plan = Plan::build(g, Placement::all_on("devsim"), sim.registry, training);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("backend devsim computes on sim:0, which cannot keep gradients in its memory"),
            std::string::npos)
      << plan.status().to_string();
  // As a fallback it declines with the same reason, and the nodes go on to the next.
  ASSERT_TRUE(sim.registry.add_backend({"empty", "a backend without kernels", nullptr, nullptr}).is_ok());
  auto fell = Plan::build(g, Placement::all_on("empty", {"devsim", "naive"}), sim.registry, training);
  ASSERT_TRUE(fell.ok()) << fell.status().to_string();
  for (const auto& s : fell.value()->steps()) {
    EXPECT_EQ(s.backend, "naive");
    const std::string why = fell.value()->node(s).op_type == "Tanh"
                                ? "backend 'devsim' has no kernel for Tanh"
                                : "devsim computes on sim:0, which cannot keep gradients in its memory";
    EXPECT_NE(s.fallback_reason.find(why), std::string::npos) << s.fallback_reason;
  }
}

/// x -> relu1 -> h1; add1 = h1 + w (w a parameter); add2 = add1 + h1 (h1 read twice: its
/// gradient is summed); tanh1 (no devsim kernel: naive, on the host) -> relu2 -> y.
// A training plan on the device: the parameter is copied in each step and its gradient
// comes back through the copy's backward, the gradients of the values the device computes
// stay in its memory (zeroed and summed there), and every gradient, the parameter's and the
// input's, is naive's; a second step gives the same (nothing summed twice).
/// One forward and backward of sim_training_graph()'s plan on x: every parameter's gradient,
/// then the input's (read on the host).
std::vector<float> sim_gradients(Plan& plan, const Tensor& x = sim_training_x()) {
  std::vector<Tensor> out;
  const Status ran = plan.run({x}, &out);
  EXPECT_TRUE(ran.is_ok()) << ran.to_string();
  const Status back = plan.backward({sim_training_dy()});
  EXPECT_TRUE(back.is_ok()) << back.to_string();
  std::vector<float> grads;
  for (const ParamRef& p : plan.parameters()) {
    EXPECT_EQ(p.grad.device(), nullptr) << p.name << ": parameters' gradients are on the host";
    grads.insert(grads.end(), p.grad.f32(), p.grad.f32() + p.grad.numel());
  }
  const Tensor* dx = plan.input_grad(0);
  EXPECT_NE(dx, nullptr);
  if (dx) grads.insert(grads.end(), dx->f32(), dx->f32() + dx->numel());
  return grads;
}

PlanOptions sim_training_options() {
  PlanOptions training;
  training.training = true;
  training.input_grads = true;
  return training;
}

TEST(DevicePlans, TrainingOnADeviceGivesNaivesGradients) {
  SimRegistry sim;
  Graph g = sim_training_graph();
  ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
  const PlanOptions training = sim_training_options();
  auto step = [](Plan& plan) { return sim_gradients(plan); };
  auto naive = Plan::build(g, Placement::all_on("naive"), sim.registry, training);
  ASSERT_TRUE(naive.ok()) << naive.status().to_string();
  const std::vector<float> want = step(*naive.value());
  ASSERT_EQ(want.size(), 12u);
  auto plan = Plan::build(g, Placement::all_on("devsim"), sim.registry, training);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  int on_device = 0;
  for (const auto& s : plan.value()->steps()) on_device += s.backend == "devsim" && !s.conversion;
  EXPECT_EQ(on_device, 4) << "relu1, add1, add2, relu2";
  EXPECT_GT(plan.value()->device_bytes().at("sim:0").gradients, 0);
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    const int zeroed = sim.device->zeroed, accumulated = sim.device->accumulated;
    const std::vector<float> got = step(*plan.value());
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_FLOAT_EQ(got[k], want[k]) << k;
    EXPECT_GT(sim.device->zeroed, zeroed) << "h1's gradient is zeroed on the device";
    EXPECT_GT(sim.device->accumulated, accumulated) << "and summed there";
  }
  // x, which only the device's copy reads, goes from the caller's tensor to the device: the
  // plan holds no host buffer for it (ResNet-50's 38.5 MB batch at 64 was copied into one
  // first, then to the GPU from pageable memory).
  const Tensor x = sim_training_x();
  for (const auto& v : plan.value()->values()) {
    if (v.is_input) {
      EXPECT_EQ(v.tensor.data(), nullptr) << v.name;
    }
  }
  {  // bench page-locks the parameter and its gradient, which the copies read and write each
     // step, and the input
    size_t host_bytes = 0;
    for (const ParamRef& p : plan.value()->parameters()) host_bytes += p.value.bytes() + p.grad.bytes();
    ASSERT_GT(host_bytes, 0u);
    const PinnedHost pinned = plan.value()->pin_parameters();
    EXPECT_EQ(pinned.bytes(), host_bytes);
    const PinnedHost pinned_x = plan.value()->pin_inputs({x});
    EXPECT_EQ(pinned_x.bytes(), x.bytes());
    EXPECT_EQ(sim.device->pinned_bytes(), host_bytes + x.bytes());
    const std::vector<float> got = sim_gradients(*plan.value(), x);
    EXPECT_TRUE(sim.device->copied_from(x.data())) << "the copy read the caller's x";
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_FLOAT_EQ(got[k], want[k]) << k;
  }
  EXPECT_EQ(sim.device->pinned_bytes(), 0u) << "unpinned when the PinnedHost goes";
  plan.value().reset();
  EXPECT_EQ(sim.device->live_allocations(), 0u) << "gradient buffers are released with the plan";
}

TEST(DevicePlans, APlantedBugOnADeviceIsTheSameBugAsOnTheHost) {
  // A planted bug's backend "<base>+<bug>" computes on the base's device: the planner must copy
  // to and from it as for the base, and the wrong gradient (computed on the host) must reach the
  // device's memory through host copies. On cuda, host pointers handed to its kernels were an
  // illegal address; here a kernel refuses them, and a host read of the device's words negates.
  for (const std::string bug : {"relu-mask-inverted", "add-operand-dropped"}) {
    SCOPED_TRACE(bug);
    SimRegistry sim;
    Graph g = sim_training_graph();
    ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
    ASSERT_TRUE(register_planted_bug(sim.registry, "naive", bug).is_ok());
    ASSERT_TRUE(register_planted_bug(sim.registry, "devsim", bug).is_ok());
    const BackendInfo* info = sim.registry.info("devsim+" + bug);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->device, sim.device) << "the base's device";
    auto correct = Plan::build(g, Placement::all_on("naive"), sim.registry, sim_training_options());
    auto host = Plan::build(g, Placement::all_on("naive+" + bug), sim.registry, sim_training_options());
    auto device = Plan::build(g, Placement::all_on("devsim+" + bug), sim.registry, sim_training_options());
    ASSERT_TRUE(correct.ok() && host.ok()) << host.status().to_string();
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    int on_device = 0;
    for (const auto& s : device.value()->steps()) on_device += s.backend == "devsim+" + bug && !s.conversion;
    EXPECT_EQ(on_device, 4) << "relu1, add1, add2, relu2";
    const std::vector<float> right = sim_gradients(*correct.value());
    const std::vector<float> want = sim_gradients(*host.value());
    const std::vector<float> got = sim_gradients(*device.value());
    ASSERT_EQ(want.size(), right.size());
    EXPECT_NE(want, right) << "the bug changes a gradient";
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_FLOAT_EQ(got[k], want[k]) << k;
  }
}

TEST(DevicePlans, AnUnavailableBackendIsRefusedByNameAndLeftOutOfAll) {
  SimRegistry sim(SIZE_MAX, "no sim device on this machine");
  EXPECT_EQ(sim.registry.unavailable("devsim"), "no sim device on this machine");
  EXPECT_EQ(sim.registry.unavailable("naive"), "");
  EXPECT_EQ(sim.registry.available_backends(), std::vector<std::string>{"naive"});
  EXPECT_EQ(sim.registry.backends().size(), 2u) << "still registered, and listed with its reason";
  Graph g = sim_graph();
  ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
  auto plan = Plan::build(g, Placement::all_on("devsim"), sim.registry);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("backend devsim is unavailable here: no sim device on this machine"),
            std::string::npos)
      << plan.status().to_string();
  // A fallback that is unavailable is passed over with the reason.
  auto fallback = Plan::build(g, Placement::all_on("naive", {"devsim"}), sim.registry);
  EXPECT_TRUE(fallback.ok()) << fallback.status().to_string();
  KernelContext ctx;
  Node relu = make_node("Relu");
  ctx.node = &relu;
  const Capability cap = sim.registry.query("devsim", ctx);
  EXPECT_EQ(cap.status.code(), StatusCode::kUnsupported);
  EXPECT_NE(cap.status.message().find("unavailable here"), std::string::npos) << cap.status.to_string();
  EXPECT_EQ(sim.device->live_allocations(), 0u);
}

}  // namespace
}  // namespace mosaic::test

namespace mosaic::test {
namespace {

class DeviceCli : public ScratchDirTest {
 protected:
  DeviceCli() : ScratchDirTest("mosaic_device_cli_") {}
  const std::string plugin = std::string(MOSAIC_PLUGIN_DIR) + "/libmosaic_test_sim_device.so";
};

TEST_F(DeviceCli, PlanShowsTheCopiesAndBenchChecksTheDeviceAgainstNaive) {
  CmdResult r = mosaic("plan zoo:fmnist-cnn --plugin " + plugin + " --backend devsim --no-fuse --json " + path("p.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("host -> sim:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sim:0 -> host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plain on sim:0"), std::string::npos) << r.out;
  const nlohmann::json plan = read_json(path("p.json"));
  int to_device = 0, to_host = 0, on_device = 0;
  for (const auto& s : plan["steps"]) {
    to_device += s["op"] == "mosaic.ToDevice" && s["from_device"] == "host" && s["output_device"] == "sim:0";
    to_host += s["op"] == "mosaic.ToHost" && s["from_device"] == "sim:0" && s["output_device"] == "host";
    on_device += s["op"] == "Relu" && s["backend"] == "devsim" && s["output_device"] == "sim:0";
  }
  EXPECT_GE(on_device, 1) << plan.dump();
  EXPECT_EQ(to_device, on_device) << "each Relu's input comes from a host node";
  EXPECT_EQ(to_host, on_device);

  r = mosaic("bench zoo:fmnist-cnn --plugin " + plugin + " --backends devsim --no-fuse --batch 2 --no-peaks "
             "--iterations 2 --warmup 1 --repeats 1 --json " + path("b.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json doc = read_json(path("b.json"));
  EXPECT_TRUE(doc["runs"][0]["check"]["passed"].get<bool>()) << doc["runs"][0]["check"].dump();
  // The device's memory apart from the host's.
  const nlohmann::json& sim0 = doc["runs"][0]["memory"]["devices"]["sim:0"];
  EXPECT_GT(sim0["activation_bytes"].get<int64_t>(), 0) << doc["runs"][0]["memory"].dump();
  EXPECT_EQ(sim0["constant_bytes"].get<int64_t>(), 0) << "Relu reads no constant";
  EXPECT_EQ(sim0["workspace_bytes"].get<int64_t>() % static_cast<int64_t>(sim::kReluWorkspaceBytes), 0);
  EXPECT_GT(sim0["workspace_bytes"].get<int64_t>(), 0) << "the Relus' device scratch";
  EXPECT_EQ(doc["runs"][0]["memory"]["pinned_input_bytes"].get<int64_t>(), 0)
      << "the input goes to a Conv on the host first: nothing to pin";
  EXPECT_NE(r.out.find("on sim:0: activations"), std::string::npos) << r.out;
}

// bench in training on the device: the Relus train there (their backward on the device, the
// gradients summed in its memory), the check against naive's gradients passes, and the
// gradients' bytes on the device are reported.
TEST_F(DeviceCli, BenchTrainsOnTheDeviceAndChecksItsGradientsAgainstNaive) {
  CmdResult r = mosaic("bench zoo:fmnist-cnn --plugin " + plugin + " --backends devsim --no-fuse --mode training "
                       "--batch 2 --no-peaks --iterations 2 --warmup 1 --repeats 1 --json " + path("t.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json run = read_json(path("t.json"))["runs"][0];
  EXPECT_TRUE(run["check"]["passed"].get<bool>()) << run["check"].dump();
  int relu = 0;
  for (const auto& n : run["nodes"]) relu += n["op"] == "Relu" && n["backend"] == "devsim";
  EXPECT_GE(relu, 1) << run["nodes"].dump();
  EXPECT_GT(run["memory"]["devices"]["sim:0"]["gradient_bytes"].get<int64_t>(), 0) << run["memory"].dump();
  EXPECT_NE(r.out.find("gradients"), std::string::npos) << r.out;
  // No parameter is read on the device here (it runs Relu and Add): none is page-locked
  // (DevicePlans.TrainingOnADeviceGivesNaivesGradients pins one).
  EXPECT_EQ(run["memory"]["pinned_parameter_bytes"].get<int64_t>(), 0) << run["memory"].dump();
}

TEST_F(DeviceCli, BenchReportsTheDevicesOwnTimePerNodeOnItsOwnTraceThread) {
  // MOSAIC_SIM_TIMED=1: the device times its steps (Device::timing); every Relu takes its 1 ms
  // and every copy its 0.5 ms of device time, exactly, in the per-node medians.
  CmdResult r = mosaic_shell("MOSAIC_SIM_TIMED=1 " + std::string(MOSAIC_BIN) + " bench zoo:fmnist-cnn --plugin " + plugin +
                             " --backends devsim --no-fuse --batch 2 --no-peaks --iterations 3 --warmup 1 --repeats 1 "
                             "--json " + path("b.json") + " --trace " + path("t.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json run = read_json(path("b.json"))["runs"][0];
  EXPECT_TRUE(run["check"]["passed"].get<bool>()) << run["check"].dump();
  int relu = 0, copies = 0;
  for (const auto& n : run["nodes"]) {
    if (n["backend"] != "devsim") continue;
    if (n["op"] == "Relu") {
      ++relu;
      EXPECT_DOUBLE_EQ(n["median_us"].get<double>(), sim::kReluNs / 1e3) << n.dump();
    } else {
      ++copies;
      EXPECT_DOUBLE_EQ(n["median_us"].get<double>(), sim::kCopyNs / 1e3) << n.dump();
    }
  }
  EXPECT_EQ(relu, 3) << run["nodes"].dump();
  EXPECT_EQ(copies, 6) << run["nodes"].dump();
  // What the device says of itself after the run (Device::sample): its clock, 6 ms a run
  // (3 Relus, 6 copies), over at least the check, the warm-up and the 3 measured runs.
  const double clock_ms = run["device_state"]["sim:0"]["clock_ms"].get<double>();
  EXPECT_GE(clock_ms, 5 * 6.0) << run["device_state"].dump();
  EXPECT_DOUBLE_EQ(std::fmod(clock_ms, 6.0), 0.0) << clock_ms;
  EXPECT_NE(r.out.find("device:  sim:0 after the run: clock_ms "), std::string::npos) << r.out;
  // The trace: the device's steps on thread 2, named sim:0; the host's (Conv on naive) on 1.
  bool named = false;
  int on_device = 0, on_host = 0;
  const nlohmann::json trace = read_json(path("t.json"));
  for (const auto& e : trace["traceEvents"]) {
    named = named || (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == 2 && e["args"]["name"] == "sim:0");
    if (e["ph"] != "X" || !e.contains("args") || !e["args"].contains("backend")) continue;
    if (e["args"]["backend"] == "devsim") on_device += e["tid"] == 2 ? 1 : -1000;
    if (e["args"]["op"] == "Conv") on_host += e["tid"] == 1 ? 1 : -1000;
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(on_device, 9 * 3) << "3 Relu and 6 copies per measured iteration, all on the device's thread";
  EXPECT_EQ(on_host, 2 * 3);
}

TEST_F(DeviceCli, ADevicesStepsAreDividedByItsOwnPeaks) {
  // The simulated device reports fixed peaks (0.5 GFLOP/s, 2 GB/s): its steps' % of peak and
  // roofline use them, the host's steps the machine's (measured into a scratch cache).
  CmdResult r = mosaic_shell("MOSAIC_SIM_TIMED=1 MOSAIC_CACHE_DIR=" + path("cache") + " " + MOSAIC_BIN +
                             " bench zoo:fmnist-cnn --plugin " + plugin + " --backends devsim --no-fuse --batch 2 "
                             "--iterations 3 --warmup 1 --repeats 1 --json " + path("b.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("peaks on sim:0: 0.5 GFLOP/s float32, memory 2.0 GB/s"), std::string::npos) << r.out;
  const nlohmann::json doc = read_json(path("b.json"));
  ASSERT_EQ(doc["device_peaks"]["sim:0"]["gflops"].get<double>(), sim::kSimGflops) << doc["device_peaks"].dump();
  const double machine = doc["peaks"]["sgemm_gflops"].get<double>();
  ASSERT_GT(machine, 0);
  int device_nodes = 0, host_nodes = 0;
  for (const auto& n : doc["runs"][0]["nodes"]) {
    if (n["gflops"].is_null()) continue;
    const double gflops = n["gflops"].get<double>();
    if (n["backend"] == "devsim") {
      ++device_nodes;
      EXPECT_NEAR(n["pct_of_peak"].get<double>(), 100 * gflops / sim::kSimGflops, 1e-9) << n.dump();
      const double bound = std::min(sim::kSimGflops, n["arithmetic_intensity"].get<double>() * sim::kSimBandwidthGbs);
      EXPECT_NEAR(n["roofline_gflops"].get<double>(), bound, 1e-12) << n.dump();
    } else {
      ++host_nodes;
      EXPECT_NEAR(n["pct_of_peak"].get<double>(), 100 * gflops / machine, 1e-9) << n.dump();
    }
  }
  EXPECT_EQ(device_nodes, 3) << "the three Relus (copies count no FLOPs)";
  EXPECT_GT(host_nodes, 0);
  const nlohmann::json& summary = doc["runs"][0]["summary"];
  EXPECT_NEAR(summary["pct_of_peak"].get<double>(), 100 * summary["gflops"].get<double>() / sim::kSimGflops, 1e-9)
      << "a configuration computing on a device is measured against the device";
}

TEST_F(DeviceCli, AutoPlacementChargesADevicesCopies) {
  // Relu takes no time on the simulated device: without its copies it is the cheapest place
  // for a Relu. The cost model charges the copies around each at the rate they ran: with free
  // copies its choice moves Relus to the device, with 50 ms ones none.
  // `base_counts`: where a loaded machine made devsim the sequential best, its Relus that were
  // not moved off count as chosen for the device (with free copies that is the choice being
  // tested; with dear ones a Relu among devsim neighbours has no copies around it, so only
  // moves onto devsim from a host base count).
  auto choice = [&](const std::string& copy_ns, bool base_counts) {
    const std::string dir = path("cache" + copy_ns);
    CmdResult r = mosaic_shell("MOSAIC_SIM_TIMED=1 MOSAIC_SIM_RELU_NS=0 MOSAIC_SIM_COPY_NS=" + copy_ns +
                               " MOSAIC_CACHE_DIR=" + dir + " " + MOSAIC_BIN + " bench zoo:fmnist-cnn --plugin " + plugin +
                               " --assign auto --no-fuse --batch 2 --auto-budget 3 --no-peaks "
                               "--iterations 2 --warmup 1 --repeats 1 --json " + path("a" + copy_ns + ".json"));
    EXPECT_EQ(r.code, 0) << r.out;
    const nlohmann::json a = read_json(path("a" + copy_ns + ".json"))["auto_placement"];
    // The Relus the cost model put on devsim, whether the check kept its choice or not: its
    // moves onto devsim ("NODE on BACKEND (a ms vs b ms on OTHER)": the move's own backend,
    // not the one it was compared with); or, when a loaded machine made devsim the
    // sequential best (the base the moves are listed against), the Relus it did not move off.
    const std::string base = a["check"].value("sequential_best", a.value("best_single", ""));  // empty: they agreed
    const bool devsim_base = base == "devsim";
    std::set<std::string> moved_off;
    int on_device = 0;
    for (const char* list : {"moved", "rejected"})
      for (const auto& d : a.value(list, nlohmann::json::array())) {
        const std::string move = d.get<std::string>().substr(0, d.get<std::string>().find(" ("));
        moved_off.insert(move.substr(0, move.find(" on ")));
        on_device += move.size() >= 10 && move.compare(move.size() - 10, 10, " on devsim") == 0;
      }
    if (devsim_base && base_counts)
      for (const char* relu : {"relu1", "relu2", "relu3"}) on_device += moved_off.count(relu) == 0;
    return std::make_pair(on_device, a.dump());
  };
  const auto [free_copies, free_doc] = choice("0", true);
  // relu3 at least (after a Gemm, in a plain buffer; relu1 and relu2 read oneDNN's blocked
  // convolution outputs, whose reorders cost more than a Relu saves).
  EXPECT_GE(free_copies, 1) << free_doc;
  const auto [dear_copies, dear_doc] = choice("50000000", false);
  EXPECT_EQ(dear_copies, 0) << dear_doc;
}

TEST_F(DeviceCli, FindMaxBatchSearchesTheDevicesMemory) {
  // A simulated device with 4 MB: the search is bounded by it (not by the host's memory), the
  // batch it finds runs, and one more is refused by the device, by name.
  const std::string env = "MOSAIC_SIM_MEMORY=4000000 ";
  CmdResult r = mosaic_shell(env + MOSAIC_BIN + " bench zoo:fmnist-cnn --plugin " + plugin +
                             " --backends devsim --no-fuse --find-max-batch --json " + path("m.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("devsim computes on sim:0: within 3.60 MB of its memory (90% of what it has free"), std::string::npos)
      << r.out;
  const nlohmann::json c = read_json(path("m.json"))["configs"][0];
  EXPECT_EQ(c["device"], "sim:0") << c.dump();
  EXPECT_EQ(c["device_limit_bytes"].get<int64_t>(), 3600000) << c.dump();
  const int64_t max = c["max_batch"].get<int64_t>();
  ASSERT_GT(max, 1) << c.dump();
  EXPECT_LE(c["accounted_bytes"].get<int64_t>(), 3600000) << c.dump();
  EXPECT_GT(c["next_accounted_bytes"].get<int64_t>(), 3600000) << c.dump();
  r = mosaic_shell(env + MOSAIC_BIN + " bench zoo:fmnist-cnn --plugin " + plugin + " --backends devsim --no-fuse --batch " +
                   std::to_string(max) + " --iterations 1 --warmup 0 --repeats 1 --no-peaks --no-check");
  EXPECT_EQ(r.code, 0) << "the batch found runs:\n" << r.out;
  // The device's 4 MB, not 3.6: at max + 2 the plan no longer fits at all (the search keeps
  // 10% for what it does not account).
  r = mosaic_shell(env + MOSAIC_BIN + " bench zoo:fmnist-cnn --plugin " + plugin + " --backends devsim --no-fuse --batch " +
                   std::to_string(max * 2) + " --iterations 1 --warmup 0 --repeats 1 --no-peaks --no-check");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("out of device memory"), std::string::npos) << r.out;
}

TEST_F(DeviceCli, AnUnavailableBackendFailsByNameAndIsListedWithItsReason) {
  const std::string env = "MOSAIC_SIM_UNAVAILABLE='no sim device here' ";
  CmdResult r = mosaic_shell(env + MOSAIC_BIN + " backends --plugin " + plugin);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("computes on sim:0; unavailable here: no sim device here"), std::string::npos) << r.out;
  r = mosaic_shell(env + MOSAIC_BIN + " bench zoo:fmnist-cnn --plugin " + plugin + " --backends devsim --batch 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("backend 'devsim' is unavailable here: no sim device here"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("iterations"), std::string::npos) << "refused before any timing: " << r.out;
  r = mosaic_shell(env + MOSAIC_BIN + " bench zoo:fmnist-cnn --plugin " + plugin +
                   " --backends all --batch 2 --no-peaks --iterations 1 --warmup 0 --repeats 1 --json " + path("all.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("backend devsim is unavailable here (no sim device here); all leaves it out"), std::string::npos)
      << r.out;
  const nlohmann::json doc = read_json(path("all.json"));
  for (const auto& run : doc["runs"]) EXPECT_NE(run["label"], "devsim");
  EXPECT_GE(doc["runs"].size(), 2u);
}

}  // namespace
}  // namespace mosaic::test
