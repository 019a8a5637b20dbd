// Relu -> MaxPool run as MaxPool -> Relu in training plans (core/fuse_relu_pool.cpp): the
// reordered graph's training step gives, bit for bit, the output and gradients of the graph
// as written, on every backend that trains, on values full of ties and zeros (where a
// derivative taken as 1 at 0, or a tie broken differently, would show); near misses stay.
#include <gtest/gtest.h>

#include "api/util.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

/// Integers in [lo, hi] as float32: convolutions of them tie and hit 0 often.
Tensor small_integers(const Shape& shape, uint64_t seed, int lo, int hi) {
  Tensor t = random_tensor(shape, seed, static_cast<float>(lo) - 0.5f, static_cast<float>(hi) + 0.49f);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = std::nearbyint(p[i]);
  return t;
}

/// x [2, 3, 8, 8] -> Conv 3x3 (4 channels, pad 1) -> Relu [-> Pad (`pad`: ONNX's pads of
/// the 4-d tensor, its constant `value`)] -> MaxPool (`pool` attributes) -> y.
Graph conv_relu_pool(std::map<std::string, Attribute> pool, bool indices = false, std::vector<int64_t> pad = {},
                     float value = 0.f) {
  Graph g;
  g.source = "conv-relu-pool";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3, 8, 8}, {}, true});
  g.initializers["w"] = small_integers({4, 3, 3, 3}, 11, -1, 1);
  g.initializers["b"] = small_integers({4}, 12, -1, 1);
  add_node(g, make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}}), {"x", "w", "b"}, {"c"}, "conv");
  add_node(g, make_node("Relu"), {"c"}, {"r"}, "relu");
  std::string pooled = "r";
  if (!pad.empty()) {
    g.initializers["pads"] = typed(DType::kI64, {static_cast<int64_t>(pad.size())}, std::vector<double>(pad.begin(), pad.end()));
    g.initializers["value"] = Tensor::from_f32({}, {value});
    add_node(g, make_node("Pad"), {"r", "pads", "value"}, {"padded"}, "pad");
    pooled = "padded";
  }
  add_node(g, make_node("MaxPool", std::move(pool)), {pooled}, indices ? std::vector<std::string>{"y", "i"}
                                                                      : std::vector<std::string>{"y"}, "pool");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  if (indices) g.outputs.push_back(ValueInfo{"i", DType::kI64, {}, {}, false});
  return g;
}

FuseOptions reorder_only() {
  FuseOptions fo;
  fo.activations = fo.batch_norm = false;
  fo.pool_before_relu = true;
  return fo;
}

/// Each tensor of `got` equal to `want`'s, element for element.
void expect_same_bits(const std::vector<Tensor>& want, const std::vector<Tensor>& got, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape()) << what << " tensor " << k;
    for (int64_t i = 0; i < want[k].numel(); ++i)
      ASSERT_EQ(got[k].get(i), want[k].get(i)) << what << " tensor " << k << " element " << i;
  }
}

/// One training step on `backend`: the output, the input's gradient, the parameters' (the
/// output's gradient `dy`, else random).
std::vector<Tensor> step(Graph g, bool reorder, const std::string& backend, const Tensor& x, FuseReport* report,
                         const Tensor* dy_given = nullptr, std::unique_ptr<Plan>* keep = nullptr) {
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  if (reorder) *report = fuse_graph(g, reorder_only());
  PlanOptions po;
  po.training = true;
  po.input_grads = true;
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
  EXPECT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
  if (!plan.ok()) return {};
  std::vector<Tensor> out;
  EXPECT_TRUE(plan.value()->run({x}, &out).is_ok());
  if (out.empty()) return {};
  const Tensor dy = dy_given ? *dy_given : random_tensor(out[0].shape(), 21);
  EXPECT_TRUE(plan.value()->backward({dy}).is_ok());
  std::vector<Tensor> got = {out[0].clone()};
  if (const Tensor* dx = plan.value()->input_grad(0)) got.push_back(dx->clone());
  for (const ParamRef& p : plan.value()->parameters()) got.push_back(p.grad.clone());
  if (keep) *keep = std::move(plan.value());
  return got;
}

TEST(ReorderReluPool, TheTrainingStepIsTheSameBitForBitOnEveryBackend) {
  const Tensor x = small_integers({2, 3, 8, 8}, 7, -1, 1);
  const std::vector<std::map<std::string, Attribute>> pools = {
      {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}},
      // Overlapping windows with implicit padding: one element is the arg-max of several.
      {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}}};
  for (const auto& pool : pools) {
    Graph probe = conv_relu_pool(pool);
    ASSERT_TRUE(prepare_graph(probe, builtin_registry(), PrepareOptions{}).ok());
    FuseReport report;
    // The rewrite itself: the pool reads the convolution, the Relu writes y.
    {
      Graph g = probe;
      report = fuse_graph(g, reorder_only());
      ASSERT_EQ(g.nodes.size(), 3u);
      EXPECT_EQ(g.nodes[1].name, "pool");
      EXPECT_EQ(g.nodes[1].inputs[0], "c");
      EXPECT_EQ(g.nodes[2].name, "relu");
      EXPECT_EQ(g.nodes[2].inputs[0], g.nodes[1].outputs[0]);
      EXPECT_EQ(g.nodes[2].outputs[0], "y");
      EXPECT_EQ(g.value_descs.at(g.nodes[1].outputs[0]).shape, g.value_descs.at("y").shape);
      EXPECT_EQ(g.value_descs.count("r"), 0u);
      EXPECT_EQ(report.reordered, std::vector<std::string>{"pool before relu"});
    }
    int zeros = 0;  // the case must hold what it is about: pooled maxima of 0 and below
    for (const std::string& backend : training_backends(true)) {
      const auto want = step(conv_relu_pool(pool), false, backend, x, nullptr);
      const auto got = step(conv_relu_pool(pool), true, backend, x, &report);
      ASSERT_EQ(want.size(), 4u) << backend;
      expect_same_bits(want, got, backend);
      if (::testing::Test::HasFatalFailure()) return;
      for (int64_t i = 0; i < want[0].numel(); ++i) zeros += want[0].get(i) == 0;
    }
    EXPECT_GT(zeros, 0);
  }
}

TEST(ReorderReluPool, AZeroPadBetweenThemBecomesThePoolsPadsAndTheStepIsTheSameBitForBit) {
  const Tensor x = small_integers({2, 3, 8, 8}, 8, -1, 1);
  struct Case {
    std::vector<int64_t> pad;
    std::map<std::string, Attribute> pool;
    std::vector<int64_t> pads_after;
  };
  const std::vector<Case> cases = {
      // The zoo's CIFAR networks: a zero row and column after the maps, then 3x3 windows, stride 2.
      {{0, 0, 0, 0, 0, 0, 1, 1}, {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}}, {0, 0, 1, 1}},
      // VGG16-CIFAR's: a zero border, then 2x2 windows at stride 2 (the borders clip the first
      // and last windows of each row and column once the Pad is the pool's).
      {{0, 0, 1, 1, 0, 0, 1, 1}, {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}}, {1, 1, 1, 1}},
      // Both sides, added to the pool's own pads.
      {{0, 0, 1, 1, 0, 0, 1, 0},
       {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({0, 1, 0, 1})}},
       {1, 2, 1, 1}}};
  for (const Case& c : cases) {
    Graph probe = conv_relu_pool(c.pool, false, c.pad);
    ASSERT_TRUE(prepare_graph(probe, builtin_registry(), PrepareOptions{}).ok());
    Graph g = probe;
    const FuseReport report = fuse_graph(g, reorder_only());
    ASSERT_EQ(g.nodes.size(), 3u);
    EXPECT_EQ(g.nodes[1].name, "pad+pool");
    EXPECT_EQ(g.nodes[1].inputs[0], "c");
    EXPECT_EQ(g.nodes[1].attr_ints("pads"), c.pads_after);
    EXPECT_EQ(g.nodes[2].name, "relu");
    EXPECT_EQ(g.nodes[2].outputs[0], "y");
    EXPECT_EQ(g.value_descs.count("padded"), 0u);
    EXPECT_EQ(report.reordered, std::vector<std::string>{"pool before relu (pad as its pads)"});
    int zeros = 0;
    for (const std::string& backend : training_backends(true)) {
      FuseReport r;
      const auto want = step(conv_relu_pool(c.pool, false, c.pad), false, backend, x, nullptr);
      const auto got = step(conv_relu_pool(c.pool, false, c.pad), true, backend, x, &r);
      ASSERT_EQ(want.size(), 4u) << backend;
      expect_same_bits(want, got, backend + " padded");
      if (::testing::Test::HasFatalFailure()) return;
      for (int64_t i = 0; i < want[0].numel(); ++i) zeros += want[0].get(i) == 0;
    }
    EXPECT_GT(zeros, 0);  // windows whose maximum is a padded zero or a Relu's
  }
  // Not a zero Pad, or pads a window could lie wholly in: left as written.
  const std::map<std::string, Attribute> pool = {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}};
  for (Graph near : {conv_relu_pool(pool, false, {0, 0, 0, 0, 0, 0, 1, 1}, 0.5f),
                     conv_relu_pool(pool, false, {0, 0, 2, 0, 0, 0, 0, 0}),
                     conv_relu_pool(pool, false, {0, 1, 0, 0, 0, 0, 0, 0})}) {
    ASSERT_TRUE(prepare_graph(near, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(near, reorder_only()).reordered.empty());
    EXPECT_EQ(near.nodes.size(), 4u);
  }
}

TEST(ReorderReluPool, NearMissesAreLeftAlone) {
  const auto reordered = [](Graph g) {
    EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    return fuse_graph(g, reorder_only()).reordered;
  };
  const std::map<std::string, Attribute> pool = {{"kernel_shape", A::of_ints({2, 2})},
                                                 {"strides", A::of_ints({2, 2})}};
  EXPECT_EQ(reordered(conv_relu_pool(pool)).size(), 1u);
  // The pool's Indices are read: they index the Relu's output, which would no longer exist.
  EXPECT_TRUE(reordered(conv_relu_pool(pool, true)).empty());
  // The Relu's output is read elsewhere too.
  Graph twice = conv_relu_pool(pool);
  twice.outputs.push_back(ValueInfo{"r", DType::kF32, {}, {}, false});
  EXPECT_TRUE(reordered(twice).empty());
  // Off unless asked (inference plans fuse the Relu into the Conv instead).
  Graph g = conv_relu_pool(pool);
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  FuseOptions off = reorder_only();
  off.pool_before_relu = false;
  EXPECT_TRUE(fuse_graph(g, off).reordered.empty());
  EXPECT_TRUE(fuse_graph(g, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false))
                  .reordered.empty());
  // A placement that runs the Relu elsewhere keeps the pair as written.
  Graph apart = conv_relu_pool(pool);
  ASSERT_TRUE(prepare_graph(apart, builtin_registry(), PrepareOptions{}).ok());
  auto placement = api::assign_placement("Relu=naive,*=onednn", {"naive"});
  ASSERT_TRUE(placement.ok());
  EXPECT_TRUE(fuse_graph(apart, fuse_options_for(placement.value(), builtin_registry(), true)).reordered.empty());
  Graph together = conv_relu_pool(pool);
  ASSERT_TRUE(prepare_graph(together, builtin_registry(), PrepareOptions{}).ok());
  EXPECT_EQ(fuse_graph(together, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), true)).reordered,
            std::vector<std::string>{"pool before relu"});
}

/// x [2, 3, 8, 8] -> Conv 3x3 (16 channels, pad 1) -> Relu -> MaxPool 2x2 -> Flatten -> Gemm
/// (5 outputs) -> y: reordered, the Relu lands between oneDNN's blocked pool and the Flatten.
Graph conv_relu_pool_gemm() {
  Graph g = conv_relu_pool({{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}});
  g.source = "conv-relu-pool-gemm";
  g.initializers["w"] = small_integers({16, 3, 3, 3}, 11, -1, 1);
  g.initializers["b"] = small_integers({16}, 12, -1, 1);
  g.initializers["fw"] = small_integers({5, 16 * 4 * 4}, 13, -1, 1);
  g.initializers["fb"] = small_integers({5}, 14, -1, 1);
  g.outputs.clear();
  add_node(g, make_node("Flatten"), {"y"}, {"f"}, "flatten");
  add_node(g, make_node("Gemm", {{"transB", A::of_int(1)}}), {"f", "fw", "fb"}, {"z"}, "fc");
  g.outputs.push_back(ValueInfo{"z", DType::kF32, {}, {}, false});
  return g;
}

// onednn runs a Relu from a blocked layout to plain as one pass each way (relu_to_plain,
// relu_grad_to_blocked in common/eltwise_loops.cpp): the training step equals naive's bit for
// bit (integer data and output gradient: every sum exact), and the pass is the one taken (no
// staging buffer where the input is blocked).
TEST(ReorderReluPool, AReluAtTheLayoutBoundaryIsOnePassOnOnednnAndExact) {
  if (!builtin_registry().has_backend("onednn")) GTEST_SKIP() << "no onednn backend";
  const Tensor x = small_integers({2, 3, 8, 8}, 7, -2, 2);
  const Tensor dz = small_integers({2, 5}, 9, -2, 2);
  FuseReport report;
  const auto want = step(conv_relu_pool_gemm(), true, "naive", x, &report, &dz);
  std::unique_ptr<Plan> plan;
  const auto got = step(conv_relu_pool_gemm(), true, "onednn", x, &report, &dz, &plan);
  ASSERT_EQ(report.reordered, std::vector<std::string>{"pool before relu"});
  ASSERT_EQ(want.size(), 6u);
  expect_same_bits(want, got, "onednn against naive");
  if (HasFatalFailure()) return;
  ASSERT_NE(plan, nullptr);
  int positive = 0, negative = 0;
  const PlanStep* pool = nullptr;
  const PlanStep* relu = nullptr;
  for (const PlanStep& st : plan->steps()) {
    const std::string& name = plan->graph().nodes[static_cast<size_t>(st.node)].name;
    if (name == "pool") pool = &st;
    if (name == "relu") relu = &st;
  }
  ASSERT_TRUE(pool && relu);
  const Tensor* pooled = relu->src[0];
  for (int64_t i = 0; i < pooled->numel(); ++i) (pooled->f32()[i] > 0 ? positive : negative) += 1;
  EXPECT_GT(positive, 0);
  EXPECT_GT(negative, 0);  // the Relu has something to clip
  if (!pool->kernel->output_layout(0)) GTEST_SKIP() << "oneDNN kept the pool's output plain here: no boundary";
  EXPECT_EQ(relu->kernel->workspace_bytes(), 0u) << "the Relu staged its output: the one-pass path was not taken";
}

}  // namespace
}  // namespace mosaic::test
