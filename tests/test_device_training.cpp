// What training keeps between steps, and where: resident parameters on a device with their
// gradients and optimizer state (PlanOptions::resident_parameters, Plan::optimizer_step), state
// a device kernel updates in place, and what checkpoints, evaluation and `mosaic train` read of
// them. On the simulated device (tests/plugins/sim_device.hpp), whose memory stores every word
// with its sign flipped: a value read without its copy is wrong, not merely stale.
#include <cmath>
#include <nlohmann/json.hpp>

#include "api/checkpoint.hpp"
#include "api/train.hpp"
#include "core/loss.hpp"
#include "core/registration.hpp"
#include "core/optimizer.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "sim_cases.hpp"

namespace mosaic::test {
namespace {

using sim::SimDevice;
using A = Attribute;

// PlanOptions::resident_parameters: a parameter only the device's kernels read lives there
// with its gradient (no copy step; the device's tensors in parameters()), and training with
// Plan::optimizer_step gives naive's parameters step after step: SGD (plain, with Nesterov
// momentum) and AdamW by the device's own rule with their state there (Device::optimizer_step;
// a second, fresh optimizer starts from zeroed state), RMSprop through host mirrors (the
// optimizer's state on the host). A parameter a host kernel reads too stays the host's.
TEST(DevicePlans, ResidentParametersTrainOnTheDeviceAsNaivesDo) {
  const Tensor x = sim_training_x();
  const Tensor dy = sim_training_dy();
  PlanOptions options;
  options.training = true;
  options.resident_parameters = true;
  struct Case {
    const char* optimizer;
    double momentum;
    bool nesterov, on_device;
    int64_t state_bytes;
  };
  for (const Case& c : {Case{"sgd", 0, false, true, 0}, Case{"sgd", 0.9, true, true, 24}, Case{"adamw", 0, false, true, 48},
                        Case{"rmsprop", 0, false, false, 0}}) {
    SCOPED_TRACE(std::string(c.optimizer) + (c.momentum != 0 ? " with momentum" : ""));
    SimRegistry sim;
    Graph g = sim_training_graph();
    ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
    auto naive = Plan::build(g, Placement::all_on("naive"), sim.registry, options);
    auto plan = Plan::build(g, Placement::all_on("devsim"), sim.registry, options);
    ASSERT_TRUE(naive.ok() && plan.ok()) << plan.status().to_string();
    for (const auto& s : plan.value()->steps())
      EXPECT_FALSE(s.conversion && plan.value()->values()[s.in[0]].name == "w") << "no step copies w";
    const auto params = plan.value()->parameters();
    ASSERT_EQ(params.size(), 1u);
    EXPECT_EQ(params[0].name, "w");
    EXPECT_EQ(params[0].value.device(), sim.device.get());
    EXPECT_EQ(params[0].grad.device(), sim.device.get());
    EXPECT_EQ(plan.value()->device_bytes().at("sim:0").parameters, 24);
    OptimizerConfig oc;
    oc.lr = 0.1;
    oc.momentum = c.momentum;
    oc.nesterov = c.nesterov;
    oc.weight_decay = 0.01;
    for (int round = 0; round < 2; ++round) {  // the second with fresh optimizers
      auto opt_naive = make_optimizer(c.optimizer, oc);
      auto opt = make_optimizer(c.optimizer, oc);
      ASSERT_TRUE(opt_naive.ok() && opt.ok());
      for (int step = 0; step < 3; ++step) {
        train_step(*naive.value(), *opt_naive.value(), x, dy);
        train_step(*plan.value(), *opt.value(), x, dy);
        const Tensor want = naive.value()->parameters()[0].value;
        const Tensor got = plan.value()->parameters()[0].value.clone();
        for (int64_t i = 0; i < want.numel(); ++i)
          EXPECT_FLOAT_EQ(got.f32()[i], want.f32()[i]) << "round " << round << ", step " << step << ", " << i;
      }
    }
    EXPECT_EQ(sim.device->optimizer_steps > 0, c.on_device) << "the device's rule exactly where it has the optimizer's";
    EXPECT_EQ(plan.value()->device_bytes().at("sim:0").optimizer_state, c.state_bytes);
  }
  // w read by a host kernel too (add2 on naive): it stays the host's, copied in each step.
  SimRegistry sim;
  Graph g = sim_training_graph();
  g.nodes[2].inputs = {"h2", "w"};
  ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
  auto placement = Placement::parse("*=devsim,@add2=naive", sim.registry);
  ASSERT_TRUE(placement.ok()) << placement.status().to_string();
  auto mixed = Plan::build(g, placement.value(), sim.registry, options);
  ASSERT_TRUE(mixed.ok()) << mixed.status().to_string();
  EXPECT_EQ(mixed.value()->parameters()[0].value.device(), nullptr);
  EXPECT_EQ(mixed.value()->device_bytes().at("sim:0").parameters, 0);
}

/// Add that also counts its runs into its second operand in place, as a training
/// BatchNormalization updates its running statistics: c += 1 on the device each run.
class SimAddUpdating final : public sim::SimAdd {
 public:
  using SimAdd::SimAdd;
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    MOSAIC_RETURN_IF_ERROR(SimAdd::forward(src, dst));
    float* c = const_cast<float*>(src[1]->f32());
    for (int64_t i = 0; i < src[1]->numel(); ++i) sim::store(c, i, sim::load(c, i) + 1.f);
    return Status::ok();
  }
  bool updates_input(size_t i) const override { return i == 1; }
};

// A constant a device kernel updates in place (Kernel::updates_input) lives in the device's
// resident copy: copy_device_state_to_host brings it back over the host value (checkpoints and
// saved models read that), and copy_host_state_to_devices takes a restored host value there.
TEST(DevicePlans, AConstantADeviceKernelUpdatesIsCopiedBackOnRequest) {
  auto device = std::make_shared<SimDevice>();
  KernelRegistry registry;
  ASSERT_TRUE(register_backend(registry, register_naive).is_ok());
  DirectRegistrar direct(registry);
  BackendRegistration r(direct, sim::sim_backend_info(device, ""));
  r.kernel("Relu", sim::sim_factory<sim::SimRelu>(device), sim::sim_traits())
      .kernel("Add", sim::sim_factory<SimAddUpdating>(device), sim::sim_traits());
  ASSERT_TRUE(r.status().is_ok()) << r.status().to_string();
  Graph g = sim_graph();
  ASSERT_TRUE(prepare_graph(g, registry, PrepareOptions{}).ok());
  auto plan = Plan::build(g, Placement::all_on("devsim"), registry);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  Tensor w;
  for (const auto& v : plan.value()->values())
    if (v.name == "w") w = v.tensor;
  ASSERT_TRUE(w.defined());
  const Tensor x = Tensor::from_f32({2, 3}, {-1.f, 0.5f, 2.f, -0.3f, 0.f, 1.f});
  run_plan(*plan.value(), x);
  run_plan(*plan.value(), x);
  EXPECT_FLOAT_EQ(w.f32()[0], 0.5f) << "the device's copy moved, the host's not yet";
  ASSERT_TRUE(plan.value()->copy_device_state_to_host().is_ok());
  EXPECT_FLOAT_EQ(w.f32()[0], 2.5f) << "two runs added 1 each";
  EXPECT_FLOAT_EQ(w.f32()[5], -1.f);
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = 0.f;  // a restored value
  ASSERT_TRUE(plan.value()->copy_host_state_to_devices().is_ok());
  const std::vector<float> y = run_plan(*plan.value(), x);
  ASSERT_EQ(y.size(), 6u);
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_FLOAT_EQ(y[i], std::max(0.f, std::tanh(std::max(0.f, x.f32()[i])))) << "the run reads the restored w, " << i;
}


class TrainState : public ScratchDirTest {
 protected:
  TrainState() : ScratchDirTest("mosaic_train_state_") {}
};

// A checkpoint of a plan whose parameter lives on the device holds that parameter and its
// optimizer state (kept on the device by Device::optimizer_step) as naive's plan has them; a
// fresh plan restored from it puts both back on its device and continues exactly as the plan
// it was written from. A state buffer of the wrong size is refused by the parameter's name
// before anything is copied to the device.
TEST_F(TrainState, ACheckpointCarriesAResidentParameterAndItsDeviceOptimizerState) {
  const Tensor x = sim_training_x();
  const Tensor dy = sim_training_dy();
  PlanOptions options;
  options.training = true;
  options.resident_parameters = true;
  for (const std::string name : {"adam", "sgd"}) {
    SCOPED_TRACE(name);
    SimRegistry sim;
    Graph g = sim_training_graph();
    ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
    OptimizerConfig oc;
    oc.lr = 0.1;
    oc.momentum = name == "sgd" ? 0.9 : 0;
    oc.weight_decay = 0.01;
    auto naive = Plan::build(g, Placement::all_on("naive"), sim.registry, options);
    auto a = Plan::build(g, Placement::all_on("devsim"), sim.registry, options);
    auto b = Plan::build(g, Placement::all_on("devsim"), sim.registry, options);
    auto opt_naive = make_optimizer(name, oc), opt_a = make_optimizer(name, oc), opt_b = make_optimizer(name, oc);
    ASSERT_TRUE(naive.ok() && a.ok() && b.ok() && opt_naive.ok() && opt_a.ok() && opt_b.ok());
    ASSERT_NE(a.value()->parameters()[0].value.device(), nullptr) << "w is resident";
    for (int s = 0; s < 2; ++s) {
      train_step(*naive.value(), *opt_naive.value(), x, dy);
      train_step(*a.value(), *opt_a.value(), x, dy);
    }
    ASSERT_TRUE(opt_a.value()->state()[0].empty() || opt_a.value()->state()[0][0].empty())
        << "the optimizer holds no state for w: its device does";
    ASSERT_TRUE(a.value()->copy_device_state_to_host().is_ok());
    ASSERT_TRUE(api::write_checkpoint(path("ck"), nlohmann::json::object(), *a.value(), *opt_a.value()).is_ok());
    auto c = api::read_checkpoint(path("ck"));
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const Tensor w_naive = naive.value()->parameters()[0].value;
    ASSERT_EQ(c->values.at("w").size(), 6u);
    for (int64_t i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(c->values.at("w")[i], w_naive.f32()[i]) << "w " << i;
    const auto& want_state = opt_naive.value()->state();
    ASSERT_EQ(c->optimizer_state.size(), 1u);
    ASSERT_EQ(c->optimizer_state[0].size(), want_state[0].size());
    ASSERT_EQ(want_state[0].size(), name == "adam" ? 2u : 1u);
    for (size_t k = 0; k < want_state[0].size(); ++k) {
      ASSERT_EQ(c->optimizer_state[0][k].size(), 6u);
      for (size_t i = 0; i < 6; ++i)
        EXPECT_FLOAT_EQ(c->optimizer_state[0][k][i], want_state[0][k][i]) << "state " << k << ", " << i;
    }
    // Hostile: a buffer one value short is refused by name, and leaves the device alone.
    api::Checkpoint short_state = c.value();
    short_state.optimizer_state[0][0].pop_back();
    const Status refused = api::restore_checkpoint(path("ck"), short_state, *b.value(), *opt_b.value());
    EXPECT_FALSE(refused.is_ok());
    EXPECT_NE(refused.message().find("a state buffer of parameter 'w' has 5 values, the parameter 6"), std::string::npos)
        << refused.to_string();
    EXPECT_NE(refused.message().find(path("ck")), std::string::npos) << refused.to_string();
    // The whole checkpoint into the fresh plan b: w and its state to the device.
    opt_b = make_optimizer(name, oc);
    ASSERT_TRUE(opt_b.ok());
    const Status restored = api::restore_checkpoint(path("ck"), c.value(), *b.value(), *opt_b.value());
    ASSERT_TRUE(restored.is_ok()) << restored.to_string();
    ASSERT_TRUE(b.value()->copy_host_state_to_devices().is_ok());
    EXPECT_EQ(b.value()->device_bytes().at("sim:0").optimizer_state, static_cast<int64_t>(24 * want_state[0].size()));
    EXPECT_EQ(opt_b.value()->steps(), 2);
    for (int s = 0; s < 3; ++s) {
      train_step(*naive.value(), *opt_naive.value(), x, dy);
      train_step(*a.value(), *opt_a.value(), x, dy);
      train_step(*b.value(), *opt_b.value(), x, dy);
      const Tensor wa = a.value()->parameters()[0].value.clone(), wb = b.value()->parameters()[0].value.clone();
      const Tensor wn = naive.value()->parameters()[0].value;
      for (int64_t i = 0; i < 6; ++i) {
        EXPECT_EQ(wb.f32()[i], wa.f32()[i]) << "step " << s + 3 << ", " << i << ": the restored plan continues exactly";
        EXPECT_FLOAT_EQ(wb.f32()[i], wn.f32()[i]) << "step " << s + 3 << ", " << i;
      }
    }
  }
}

/// x [4,1,2,2] -> flatten -> gemm (W, c) -> relu -> add (+ bias [4,3]) -> y [4,3] logits: on
/// devsim, relu and add compute on the device (bias resident there), flatten and gemm fall
/// back to naive (W and c stay the host's).
Graph device_classifier() {
  Graph g;
  g.name = "device_classifier";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {4, 1, 2, 2}, {}, true});
  g.initializers["W"] = Tensor::from_f32({3, 4}, {0.3f, -0.2f, 0.5f, 0.1f, -0.4f, 0.6f, 0.2f, -0.1f, 0.15f, 0.25f, -0.35f, 0.45f});
  g.initializers["c"] = Tensor::from_f32({3}, {0.05f, -0.05f, 0.1f});
  g.initializers["bias"] = Tensor::from_f32({4, 3}, {0.1f, 0.2f, -0.1f, 0.0f, 0.3f, -0.2f, 0.2f, -0.3f, 0.1f, -0.1f, 0.0f, 0.2f});
  add_node(g, make_node("Flatten", {{"axis", A::of_int(1)}}), {"x"}, {"f"}, "flatten");
  add_node(g, make_node("Gemm", {{"transB", A::of_int(1)}}), {"f", "W", "c"}, {"h"}, "gemm");
  add_node(g, make_node("Relu"), {"h"}, {"r"}, "relu");
  add_node(g, make_node("Add"), {"r", "bias"}, {"y"}, "add");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {4, 3}, {}, true});
  return g;
}

// mosaic train on the device: the parameter only device kernels read (bias) lives there with
// its gradient and optimizer state, reported in the log; every step's loss and every epoch's
// test loss are naive's; and a run checkpointed after epoch 1 and resumed takes exactly the
// uninterrupted run's steps (the parameter and its device state restored).
TEST_F(TrainState, TrainKeepsParametersOnTheDeviceAndResumesThem) {
  const std::string model = path("m.onnx");
  ASSERT_TRUE(save_onnx(device_classifier(), model).is_ok());
  const std::string plugin = std::string(MOSAIC_PLUGIN_DIR) + "/libmosaic_test_sim_device.so";
  for (const std::string opt : {"--optimizer adam --lr 0.05", "--optimizer sgd --momentum 0.9 --lr 0.1"}) {
    SCOPED_TRACE(opt);
    const std::string run = "train " + model + " --plugin " + plugin +
                            " --data synthetic:24,1,2,2,3 --batch 4 --threads 1 --seed 3 " + opt;
    CmdResult r = mosaic(run + " --backend naive --epochs 3 --json " + path("naive.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    r = mosaic(run + " --backend devsim --epochs 3 --json " + path("full.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("on sim:0: parameters 48 B, optimizer state"), std::string::npos) << r.out;
    r = mosaic(run + " --backend devsim --epochs 1 --checkpoint " + path("ck"));
    ASSERT_EQ(r.code, 0) << r.out;
    r = mosaic(run + " --backend devsim --epochs 3 --resume " + path("ck") + " --json " + path("resumed.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    const auto naive = read_json(path("naive.json")), full = read_json(path("full.json")),
               resumed = read_json(path("resumed.json"));
    EXPECT_FALSE(naive.contains("device_memory")) << "nothing on a device";
    const nlohmann::json& sim0 = full["device_memory"]["sim:0"];
    EXPECT_EQ(sim0["parameter_bytes"].get<int64_t>(), 48) << full["device_memory"].dump();
    EXPECT_EQ(sim0["optimizer_state_bytes"].get<int64_t>(), opt.find("adam") != std::string::npos ? 96 : 48);
    EXPECT_GT(sim0["gradient_bytes"].get<int64_t>(), 0);
    ASSERT_EQ(full["steps"].size(), 15u);
    ASSERT_EQ(naive["steps"].size(), 15u);
    ASSERT_EQ(resumed["steps"].size(), 15u);
    for (size_t i = 0; i < 15; ++i) {
      const double want = naive["steps"][i]["loss"].get<double>(), got = full["steps"][i]["loss"].get<double>();
      EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << i + 1;
      EXPECT_EQ(resumed["steps"][i]["loss"].get<double>(), got) << "step " << i + 1;
    }
    for (size_t e = 0; e < 3; ++e) {
      const double want = naive["epochs"][e]["test_loss"].get<double>();
      EXPECT_NEAR(full["epochs"][e]["test_loss"].get<double>(), want, 1e-5 * std::abs(want))
          << "epoch " << e + 1 << ": the evaluation reads the device's parameters";
      EXPECT_EQ(resumed["epochs"][e]["test_loss"], full["epochs"][e]["test_loss"]) << "epoch " << e + 1;
    }
  }
}

/// x [4,1,2,2] -> BatchNormalization (scale, bias, running mean rm, running variance rv) ->
/// flatten -> gemm (W, c) -> y [4,3].
Graph batch_norm_classifier() {
  Graph g = device_classifier();
  g.name = "bn_classifier";
  g.nodes.clear();
  g.initializers.erase("bias");
  g.initializers["s"] = Tensor::from_f32({1}, {1.5f});
  g.initializers["b"] = Tensor::from_f32({1}, {-0.25f});
  g.initializers["rm"] = Tensor::from_f32({1}, {0.f});
  g.initializers["rv"] = Tensor::from_f32({1}, {1.f});
  add_node(g, make_node("BatchNormalization", {{"epsilon", A::of_float(1e-5f)}, {"momentum", A::of_float(0.9f)}}),
           {"x", "s", "b", "rm", "rv"}, {"n"}, "bn");
  add_node(g, make_node("Flatten", {{"axis", A::of_int(1)}}), {"n"}, {"f"}, "flatten");
  add_node(g, make_node("Gemm", {{"transB", A::of_int(1)}}), {"f", "W", "c"}, {"y"}, "gemm");
  return g;
}

/// Cross-entropy of batch_norm_classifier() with running statistics (mean, var) on `d`'s
/// first 4 images, by an inference plan on naive.
double batch_norm_loss(float mean, float var, const Dataset& d) {
  Graph g = batch_norm_classifier();
  g.initializers["rm"] = Tensor::from_f32({1}, {mean});
  g.initializers["rv"] = Tensor::from_f32({1}, {var});
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  auto plan = Plan::build(g, Placement::all_on("naive"), builtin_registry());
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return NAN;
  Tensor x = Tensor::empty({DType::kF32, {4, 1, 2, 2}});
  std::copy(d.images.f32(), d.images.f32() + 16, x.f32());
  Tensor labels = Tensor::empty({DType::kI64, {4}});
  std::copy(d.labels.i64(), d.labels.i64() + 4, labels.i64());
  EXPECT_TRUE(plan.value()->run({x}, nullptr).is_ok());
  auto loss = class_loss("cross-entropy", plan.value()->output(0), labels, nullptr);
  EXPECT_TRUE(loss.ok());
  return loss.ok() ? loss->loss : NAN;
}

// The per-epoch evaluation normalises with the running statistics training has updated, not
// with the model file's: with every parameter frozen only the statistics move (momentum 0.9
// over the 5 batches' means and unbiased variances, in file order), and the test loss is an
// inference plan's with those statistics set by hand.
TEST_F(TrainState, EvaluationReadsTheRunningStatisticsTrainingUpdated) {
  const std::string model = path("bn.onnx");
  ASSERT_TRUE(save_onnx(batch_norm_classifier(), model).is_ok());
  auto data = load_data("synthetic:24,1,2,2,3", 5);
  ASSERT_TRUE(data.ok()) << data.status().to_string();
  ASSERT_EQ(data->train.size(), 20);
  ASSERT_EQ(data->test.size(), 4);
  double rm = 0, rv = 1;
  for (int64_t batch = 0; batch < 5; ++batch) {
    const float* p = data->train.images.f32() + batch * 16;
    double sum = 0, sq = 0;
    for (int i = 0; i < 16; ++i) sum += p[i];
    const double mean = sum / 16;
    for (int i = 0; i < 16; ++i) sq += (p[i] - mean) * (p[i] - mean);
    rm = 0.9 * rm + 0.1 * mean;
    rv = 0.9 * rv + 0.1 * sq / 15;
  }
  const double want = batch_norm_loss(static_cast<float>(rm), static_cast<float>(rv), data->test);
  const double stale = batch_norm_loss(0.f, 1.f, data->test);
  ASSERT_GT(std::abs(want - stale), 1e-3) << "the file's statistics would give another loss";
  api::TrainOptions o;
  o.model = model;
  o.backend = "naive";
  o.batch = 4;
  o.epochs = 1;
  o.shuffle = false;
  o.freeze = {".*"};
  auto r = api::train_model(o, &data.value(), false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->log["epochs"][0]["test_loss"].get<double>(), want, 1e-5 * std::abs(want)) << "stale: " << stale;
}

// PlanOptions::loss_on_device: the output a device computes stays in its memory (one copy
// step fewer; output(0) is the device's tensor), Plan::loss runs there (Device::class_loss)
// with only each row's loss and hit coming back, and backward_from_loss trains from the
// gradient it left there: loss, hits and every gradient are naive's, for cross-entropy and the
// squared error, with an ignored row. Bad labels are refused before the device runs.
TEST(DevicePlans, TheLossRunsWhereTheLogitsAre) {
  const Tensor x = sim_training_x();
  for (const std::string name : {"cross-entropy", "mse"}) {
    SCOPED_TRACE(name);
    const Tensor labels = Tensor::from_i64({2}, name == "mse" ? std::vector<int64_t>{1, kIgnoreIndex} : std::vector<int64_t>{2, 0});
    SimRegistry sim;
    Graph g = sim_training_graph();
    ASSERT_TRUE(prepare_graph(g, sim.registry, PrepareOptions{}).ok());
    PlanOptions options;
    options.training = true;
    auto naive = Plan::build(g, Placement::all_on("naive"), sim.registry, options);
    auto host_loss = Plan::build(g, Placement::all_on("devsim"), sim.registry, options);
    options.loss_on_device = true;
    auto plan = Plan::build(g, Placement::all_on("devsim"), sim.registry, options);
    ASSERT_TRUE(naive.ok() && host_loss.ok() && plan.ok()) << plan.status().to_string();
    auto to_host = [](const Plan& p) {
      int n = 0;
      for (const auto& s : p.steps()) n += s.conversion && p.node(s).op_type == kToHostOp;
      return n;
    };
    EXPECT_EQ(to_host(*plan.value()), to_host(*host_loss.value()) - 1) << "y is not copied out";
    for (auto* p : {naive.value().get(), plan.value().get()}) ASSERT_TRUE(p->run({x}, nullptr).is_ok());
    EXPECT_EQ(plan.value()->output(0).device(), sim.device.get());
    const Plan::DeviceBytes before = plan.value()->device_bytes().at("sim:0");
    auto want = naive.value()->loss(name, labels);
    auto got = plan.value()->loss(name, labels);
    const Plan::DeviceBytes after = plan.value()->device_bytes().at("sim:0");
    EXPECT_EQ(after.gradients - before.gradients, 24) << "the logits' gradient, held on the device";
    EXPECT_EQ(after.workspace - before.workspace, 2 * (8 + 8 + 4)) << "labels, row losses and hits";
    ASSERT_TRUE(want.ok() && got.ok()) << got.status().to_string();
    EXPECT_EQ(sim.device->losses, 1);
    EXPECT_NEAR(got->loss, want->loss, 1e-6 * std::abs(want->loss));
    EXPECT_GT(want->loss, 0);
    EXPECT_EQ(got->correct, want->correct);
    EXPECT_EQ(got->counted, name == "mse" ? 1 : 2);
    EXPECT_EQ(got->counted, want->counted);
    ASSERT_TRUE(naive.value()->backward_from_loss().is_ok());
    ASSERT_TRUE(plan.value()->backward_from_loss().is_ok());
    const Tensor gw = plan.value()->parameters()[0].grad.clone(), want_gw = naive.value()->parameters()[0].grad;
    double norm = 0;
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_NEAR(gw.f32()[i], want_gw.f32()[i], 1e-6) << i;
      norm += std::abs(want_gw.f32()[i]);
    }
    EXPECT_GT(norm, 0) << "a gradient reaches w";
    // A label outside the classes: refused by element, before the device computes anything.
    auto bad = plan.value()->loss(name, Tensor::from_i64({2}, {0, 3}));
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("label 3 (element 1) outside [0, 3)"), std::string::npos) << bad.status().to_string();
    EXPECT_EQ(sim.device->losses, 1);
  }
}

}  // namespace
}  // namespace mosaic::test
