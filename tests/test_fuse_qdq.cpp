// The QDQ convolution rewrite (core/fuse_qdq.cpp): a QDQ model's DequantizeLinear -> Conv ->
// QuantizeLinear groups become QLinearConv on the model's own int8 codes where the backend
// computes it, and the integer plan agrees with the naive oracle's run of the QDQ graph as
// written (float convolutions between the quantisation nodes) within a quantisation step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "core/fuse.hpp"
#include "core/qdq.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

/// `g` (float, unprepared) in its QDQ form, its activations calibrated on the float graph's own
/// ranges over `x` (the values `probes` and the first output; x itself in [-1, 1]), prepared.
void quantise_on_own_ranges(Graph& g, const Tensor& x, const std::vector<std::string>& probes) {
  Graph probe = g;
  for (const auto& v : probes) probe.outputs.push_back(ValueInfo{v, DType::kF32, {}, {}, false});
  EXPECT_TRUE(prepare_graph(probe, builtin_registry(), PrepareOptions{}).ok());
  std::vector<Tensor> values;
  EXPECT_TRUE(Plan::build(probe, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &values).is_ok());
  std::map<std::string, std::pair<float, float>> ranges;
  std::vector<std::string> names = {g.outputs[0].name};
  names.insert(names.end(), probes.begin(), probes.end());
  for (size_t i = 0; i < names.size(); ++i) {
    float lo = 0, hi = 0;
    for (int64_t k = 0; k < values[i].numel(); ++k) lo = std::min(lo, values[i].f32()[k]), hi = std::max(hi, values[i].f32()[k]);
    ranges[names[i]] = {lo, hi};
  }
  ranges[g.inputs[0].name] = {-1.f, 1.f};
  Graph prepared = g;
  EXPECT_TRUE(prepare_graph(prepared, builtin_registry(), PrepareOptions{}).ok());
  auto targets = qdq_targets(g, prepared.value_descs, QdqOptions{});
  EXPECT_TRUE(targets.ok()) << targets.status().to_string();
  EXPECT_TRUE(apply_qdq(g, targets.value(), ranges, QdqOptions{}).ok());
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
}

/// x [2, 8, 10, 10] -> Conv (16 channels, pads 1) -> Relu -> Conv (8 channels, pads 1, GROUP)
/// -> Relu -> y, in its QDQ form (per-channel int8 weights, uint8 activations calibrated on the
/// float graph's own ranges over `x`), as loaded and prepared.
Graph qdq_graph(const Tensor& x, int64_t group = 1, bool explicit_pad = false, float pad_value = 0.f) {
  Graph g;
  g.source = "qdq-convs";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 8, 10, 10}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w1"] = random_tensor({16, 8, 3, 3}, 1, -0.3f, 0.3f);
  g.initializers["b1"] = random_tensor({16}, 2, -0.2f, 0.2f);
  g.initializers["w2"] = random_tensor({8, 16 / group, 3, 3}, 3, -0.3f, 0.3f);
  g.initializers["b2"] = random_tensor({8}, 4, -0.2f, 0.2f);
  const Attribute pads = Attribute::of_ints({1, 1, 1, 1});
  add_node(g, make_node("Conv", {{"pads", pads}}), {"x", "w1", "b1"}, {"c1"}, "conv1");
  add_node(g, make_node("Relu"), {"c1"}, {"r1"}, "relu1");
  if (explicit_pad) {  // VGG's layout: Pad(1) then an unpadded convolution
    g.initializers["p2"] = Tensor::from_i64({8}, {0, 0, 1, 1, 0, 0, 1, 1});
    g.initializers["v2"] = Tensor::from_f32({}, {pad_value});
    add_node(g, make_node("Pad"), {"r1", "p2", "v2"}, {"r1p"}, "pad2");
    add_node(g, make_node("Conv", {{"group", Attribute::of_int(group)}}), {"r1p", "w2", "b2"}, {"c2"}, "conv2");
  } else {
    add_node(g, make_node("Conv", {{"pads", pads}, {"group", Attribute::of_int(group)}}), {"r1", "w2", "b2"}, {"c2"}, "conv2");
  }
  add_node(g, make_node("Relu"), {"c2"}, {"y"}, "relu2");
  quantise_on_own_ranges(g, x, explicit_pad ? std::vector<std::string>{"c1", "r1", "r1p", "c2"} : std::vector<std::string>{"c1", "r1", "c2"});
  return g;
}

/// Whether oneDNN's int8 products accumulate exactly here (VNNI or AMX: its isa, as
/// backends/onednn/conv.cpp's int8_products_exact reads it), so that it takes 8-bit weights.
bool onednn_has_int8_exact_products() {
  const BackendInfo* info = builtin_registry().info("onednn");
  if (!info || !info->properties) return false;
  for (const auto& [key, isa] : info->properties().kernels)
    if (key == "isa") return isa == "avx512_core_vnni" || isa == "avx512_core_bf16" || isa == "avx512_core_amx";
  return false;
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

/// The outputs of `fused` on onednn against naive's run of `qdq` (unfused) on x: the largest
/// difference in steps of the output's quantisation scale, and the share of exact elements
/// (within `exact_within` of a step: a float output's sums round differently).
std::pair<double, double> steps_apart(const Graph& fused, const Graph& qdq, const Tensor& x, double step,
                                      double exact_within = 1e-6) {
  std::vector<Tensor> got, want;
  auto plan = Plan::build(fused, Placement::all_on("onednn", {}), builtin_registry());
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  if (!plan.ok()) return {INFINITY, 0};
  EXPECT_TRUE(plan.value()->run({x}, &got).is_ok());
  EXPECT_TRUE(Plan::build(qdq, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
  double worst = 0;
  int64_t exact = 0;
  for (int64_t i = 0; i < want[0].numel(); ++i) {
    const double d = std::fabs(static_cast<double>(got[0].f32()[i]) - want[0].f32()[i]);
    worst = std::max(worst, d / step);
    exact += d <= exact_within * step;
  }
  return {worst, static_cast<double>(exact) / static_cast<double>(want[0].numel())};
}

/// A step of the second convolution's output quantisation: y = Relu(DequantizeLinear(c2 codes)).
double c2_step(const Graph& qdq) {
  for (const auto& node : qdq.nodes)
    if (node.op_type == "DequantizeLinear" && node.inputs[0].find("c2") != std::string::npos)
      return qdq.initializers.at(node.inputs[1]).get(0);
  return 0;
}

TEST(QdqFusion, ConvGroupsBecomeQLinearConvOnTheModelsCodesAndAgreeWithinAStep) {
  if (!onednn_has_int8_exact_products()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  const Tensor x = random_tensor({2, 8, 10, 10}, 5, -1.f, 1.f);
  const Graph qdq = qdq_graph(x);
  // Load kept the int8 codes of both weights and both biases beside the floats they fold to.
  int codes = 0;
  for (const auto& [name, d] : qdq.dequantized) codes += d.codes.dtype() == DType::kI8 || d.codes.dtype() == DType::kI32;
  EXPECT_EQ(codes, 4);
  EXPECT_EQ(count_op(qdq, "Conv"), 2);

  Graph fused = qdq;
  const FuseReport r = fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "Conv"), 0);
  ASSERT_EQ(count_op(fused, "QLinearConv"), 2);
  for (const auto& node : fused.nodes) {
    if (node.op_type != "QLinearConv") continue;
    // Its weights are the model's codes, its bias the model's int32 codes, element for element.
    const std::string conv = node.name.substr(0, node.name.find('+'));
    const Tensor* w = nullptr;
    const Tensor* b = nullptr;
    for (const auto& [name, d] : qdq.dequantized) {
      if (name.rfind(conv == "conv1" ? "w1" : "w2", 0) == 0) w = &d.codes;
      if (name.rfind(conv == "conv1" ? "b1" : "b2", 0) == 0) b = &d.codes;
    }
    ASSERT_TRUE(w && b) << node.name;
    const Tensor& wq = fused.initializers.at(node.inputs[3]);
    const Tensor& bq = fused.initializers.at(node.inputs[8]);
    ASSERT_EQ(wq.dtype(), DType::kI8);
    ASSERT_EQ(bq.dtype(), DType::kI32);
    for (int64_t i = 0; i < w->numel(); ++i) ASSERT_EQ(wq.get_i64(i), w->get_i64(i)) << node.name << " weight " << i;
    for (int64_t i = 0; i < b->numel(); ++i) ASSERT_EQ(bq.get_i64(i), b->get_i64(i)) << node.name << " bias " << i;
  }
  for (const auto& node : qdq.nodes) {
    if (node.op_type != "Conv") continue;
    EXPECT_FALSE(fused.initializers.count(node.inputs[1])) << "dead float weights are dropped";
  }
  EXPECT_EQ(std::count_if(r.fused.begin(), r.fused.end(), [](const std::string& n) { return n.find("conv") == 0; }), 2);

  const double step = c2_step(qdq);
  ASSERT_GT(step, 0);
  const auto [worst, exact] = steps_apart(fused, qdq, x, step);
  std::cout << "[ steps    ] the integer plan within " << worst << " steps of naive's QDQ run, " << 100 * exact
            << "% of the outputs exact\n";
  EXPECT_LE(worst, 2.0001) << "an edge of c1 moves c2 by at most a step or two";
  EXPECT_GE(exact, 0.95);
}

/// Between the two convolutions, DequantizeLinear -> Relu -> Pad -> QuantizeLinear becomes a
/// code lookup (core/fuse_qdq_codes.cpp) and the Pad of codes, whose value is the second
/// convolution's input zero point, folds into that convolution's pads: no float pass is left,
/// and the plan still agrees with naive's run of the QDQ graph as written within a step.
TEST(QdqFusion, ThePadBetweenTwoIntegerConvolutionsFoldsIntoTheSecond) {
  if (!onednn_has_int8_exact_products()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  const Tensor x = random_tensor({2, 8, 10, 10}, 5, -1.f, 1.f);
  const Graph qdq = qdq_graph(x, 1, true);
  EXPECT_EQ(count_op(qdq, "Pad"), 1);
  Graph fused = qdq;
  const FuseReport r = fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "Pad"), 0);
  EXPECT_EQ(count_op(fused, "CodeLookup"), 1);
  EXPECT_EQ(count_op(fused, "DequantizeLinear") + count_op(fused, "Relu"), 2) << "only the output's DequantizeLinear -> Relu";
  bool padded = false;
  for (const auto& node : fused.nodes)
    if (node.op_type == "QLinearConv" && node.name.rfind("pad2+", 0) == 0)
      padded = node.attr_ints("pads") == std::vector<int64_t>{1, 1, 1, 1};
  EXPECT_TRUE(padded) << "conv2 takes the Pad's pads";
  const double step = c2_step(qdq);
  ASSERT_GT(step, 0);
  const auto [worst, exact] = steps_apart(fused, qdq, x, step);
  EXPECT_LE(worst, 2.0001);
  EXPECT_GE(exact, 0.95);
  // Padded with 0.3, not the zero point's 0: the Pad stays, on codes, and the plan agrees as well.
  const Graph other = qdq_graph(x, 1, true, 0.3f);
  fused = other;
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "Pad"), 1);
  EXPECT_EQ(count_op(fused, "CodeLookup"), 1);
  const auto [worst_other, exact_other] = steps_apart(fused, other, x, step);
  EXPECT_LE(worst_other, 2.0001);
  EXPECT_GE(exact_other, 0.95);
}

/// Grouped convolutions (2 groups, and 8 groups of 2 input channels each) as QLinearConv on
/// oneDNN's grouped int8 convolution: the integer plan within a step of naive's QDQ run.
TEST(QdqFusion, GroupedConvolutionsRunInInt8AndAgreeWithinAStep) {
  if (!onednn_has_int8_exact_products()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  const Tensor x = random_tensor({2, 8, 10, 10}, 5, -1.f, 1.f);
  for (int64_t group : {2, 8}) {
    SCOPED_TRACE("group " + std::to_string(group));
    const Graph qdq = qdq_graph(x, group);
    Graph fused = qdq;
    fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
    ASSERT_EQ(count_op(fused, "QLinearConv"), 2);
    bool grouped = false;
    for (const auto& node : fused.nodes)
      grouped = grouped || (node.op_type == "QLinearConv" && node.attr_int("group", 1) == group);
    EXPECT_TRUE(grouped);
    const auto [worst, exact] = steps_apart(fused, qdq, x, c2_step(qdq));
    EXPECT_LE(worst, 2.0001);
    EXPECT_GE(exact, 0.95);
  }
}

/// A residual block in QDQ form: x -> conv1 -> relu -> r1; conv2(r1) -> c2; Add(c2, r1) -> Relu
/// -> conv3 -> y. The Add's two DequantizeLinear, the Add, its Relu and the QuantizeLinear
/// become one com.microsoft QLinearAdd on codes (core/fuse_qdq_codes.cpp) on onednn, and the
/// plan agrees with naive's QDQ run within a step.
TEST(QdqFusion, AResidualAddOnCodesIsOneQLinearAddWithinAStep) {
  if (!onednn_has_int8_exact_products()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  const Tensor x = random_tensor({2, 8, 10, 10}, 5, -1.f, 1.f);
  Graph g;
  g.source = "qdq-residual";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 8, 10, 10}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w1"] = random_tensor({16, 8, 3, 3}, 1, -0.3f, 0.3f);
  g.initializers["w2"] = random_tensor({16, 16, 3, 3}, 3, -0.2f, 0.2f);
  g.initializers["w3"] = random_tensor({8, 16, 3, 3}, 6, -0.2f, 0.2f);
  const Attribute pads = Attribute::of_ints({1, 1, 1, 1});
  add_node(g, make_node("Conv", {{"pads", pads}}), {"x", "w1"}, {"c1"}, "conv1");
  add_node(g, make_node("Relu"), {"c1"}, {"r1"}, "relu1");
  add_node(g, make_node("Conv", {{"pads", pads}}), {"r1", "w2"}, {"c2"}, "conv2");
  add_node(g, make_node("Add"), {"c2", "r1"}, {"s"}, "add");
  add_node(g, make_node("Relu"), {"s"}, {"r2"}, "relu2");
  add_node(g, make_node("Conv", {{"pads", pads}}), {"r2", "w3"}, {"y"}, "conv3");
  quantise_on_own_ranges(g, x, {"c1", "r1", "c2", "s", "r2"});
  Graph fused = g;
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "Add"), 0);
  ASSERT_EQ(count_op(fused, "QLinearAdd"), 1);
  for (const auto& node : fused.nodes)
    if (node.op_type == "QLinearAdd") {
      EXPECT_EQ(node.attr_string("mosaic.activation", ""), "Relu");
    }
  // y is conv3's float output (no QuantizeLinear after it): a step of its input's scale, times
  // the weights, is the resolution; compare against the output's own scale instead.
  double scale = 0;
  {
    std::vector<Tensor> want;
    ASSERT_TRUE(Plan::build(g, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
    for (int64_t i = 0; i < want[0].numel(); ++i) scale = std::max(scale, std::fabs(static_cast<double>(want[0].f32()[i])));
  }
  const auto [worst, exact] = steps_apart(fused, g, x, scale, 1e-6);
  EXPECT_LE(worst, 0.03) << "within 3% of the output's scale, bench's rule for a quantised model";
  // And im2col (no integer convolution) keeps the float graph.
  Graph cpu = g;
  fuse_graph(cpu, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(cpu, "QLinearAdd"), 0) << "the oracle runs the Add as written";
}

TEST(QdqFusion, OnlyWhereTheBackendTakesTheIntegerConvolution) {
  const Tensor x = random_tensor({2, 8, 10, 10}, 5, -1.f, 1.f);
  // im2col has no QLinearConv, and naive, which has, is the oracle that runs the QDQ model
  // as written: nothing changes on either.
  for (const char* backend : {"im2col", "naive"}) {
    Graph g = qdq_graph(x);
    fuse_graph(g, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
    EXPECT_EQ(count_op(g, "Conv"), 2) << backend;
    EXPECT_EQ(count_op(g, "QLinearConv"), 0) << backend;
  }
  // onednn's int8 convolution takes groups too (docs/backends.md): both fuse where the CPU sums
  // exactly (QdqFusion.GroupedConvolutionsRunInInt8AndAgreeWithinAStep checks the values).
  const Graph grouped = qdq_graph(x, 2);
  Graph fused = grouped;
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "Conv"), onednn_has_int8_exact_products() ? 0 : 2);
  // Each QuantizeLinear stays, or ends an integer convolution or a code lookup (core/fuse_qdq_codes.cpp).
  EXPECT_EQ(count_op(fused, "QuantizeLinear") + count_op(fused, "QLinearConv") + count_op(fused, "CodeLookup"),
            count_op(grouped, "QuantizeLinear"));
  // Training plans fuse nothing of the kind (QLinearConv has no backward).
  Graph training = qdq_graph(x);
  fuse_graph(training, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), true));
  EXPECT_EQ(count_op(training, "QLinearConv"), 0);
}

/// x [2, 5, 32] -> MatMul (W [32, 24]) -> Add (bias) -> y in its QDQ form (per-column int8
/// weights, uint8 activations calibrated on the float graph's ranges over `x`), prepared.
Graph qdq_matmul_graph(const Tensor& x) {
  Graph g;
  g.source = "qdq-matmul";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 5, 32}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w"] = random_tensor({32, 24}, 21, -0.4f, 0.4f);
  g.initializers["b"] = random_tensor({24}, 22, -0.2f, 0.2f);
  add_node(g, make_node("MatMul"), {"x", "w"}, {"m"}, "mm");
  add_node(g, make_node("Add"), {"m", "b"}, {"y"}, "bias");
  quantise_on_own_ranges(g, x, {"m"});
  return g;
}

TEST(QdqFusion, MatMulGroupsBecomeQLinearMatMulAndAgreeWithinAStep) {
  const Tensor x = random_tensor({2, 5, 32}, 23, -1.f, 1.f);
  const Graph qdq = qdq_matmul_graph(x);
  ASSERT_EQ(count_op(qdq, "MatMul"), 1);
  for (const char* backend : {"im2col", "naive"}) {  // no rewrite where the backend lacks it, or on the oracle
    Graph g = qdq;
    fuse_graph(g, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
    EXPECT_EQ(count_op(g, "QLinearMatMul"), 0) << backend;
  }
  if (!onednn_has_int8_exact_products()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  Graph fused = qdq;
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  ASSERT_EQ(count_op(fused, "QLinearMatMul"), 1);
  EXPECT_EQ(count_op(fused, "MatMul"), 0);
  for (const auto& node : fused.nodes) {
    if (node.op_type != "QLinearMatMul") continue;
    const Tensor& wq = fused.initializers.at(node.inputs[3]);
    const Tensor& ws = fused.initializers.at(node.inputs[4]);
    EXPECT_EQ(wq.dtype(), DType::kI8);
    EXPECT_EQ(ws.numel(), 24) << "a scale per column of B";
  }
  // m's step: the scale of the QuantizeLinear after the MatMul; y = DQ(m) + b keeps it.
  double step = 0;
  for (const auto& node : qdq.nodes)
    if (node.op_type == "QuantizeLinear" && node.inputs[0] == "m") step = qdq.initializers.at(node.inputs[1]).get(0);
  ASSERT_GT(step, 0);
  const auto [worst, exact] = steps_apart(fused, qdq, x, step);
  std::cout << "[ steps    ] the integer plan within " << worst << " steps of naive's QDQ run, " << 100 * exact
            << "% of the outputs exact\n";
  EXPECT_LE(worst, 1.0001);
  EXPECT_GE(exact, 0.97);
}

/// x [6, 32] -> Gemm (W1 [24, 32], transB) -> Relu -> Gemm (W2 [24, 10]) -> y, in its QDQ form
/// (per-column int8 weights, int32 C codes, uint8 activations calibrated on the float graph's
/// own ranges over `x`; y, the output, stays float as a classifier's logits do), prepared.
Graph qdq_gemm_graph(const Tensor& x) {
  Graph g;
  g.source = "qdq-gemm";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {6, 32}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["w1"] = random_tensor({24, 32}, 31, -0.4f, 0.4f);
  g.initializers["c1"] = random_tensor({24}, 32, -0.3f, 0.3f);
  g.initializers["w2"] = random_tensor({24, 10}, 33, -0.4f, 0.4f);
  g.initializers["c2"] = random_tensor({10}, 34, -0.3f, 0.3f);
  add_node(g, make_node("Gemm", {{"transB", Attribute::of_int(1)}}), {"x", "w1", "c1"}, {"m1"}, "fc1");
  add_node(g, make_node("Relu"), {"m1"}, {"r1"}, "relu1");
  add_node(g, make_node("Gemm"), {"r1", "w2", "c2"}, {"y"}, "fc2");
  quantise_on_own_ranges(g, x, {"m1", "r1"});
  return g;
}

TEST(QdqFusion, GemmGroupsBecomeQGemmOnTheModelsCodesAndAgreeWithinAStep) {
  const Tensor x = random_tensor({6, 32}, 35, -1.f, 1.f);
  const Graph qdq = qdq_gemm_graph(x);
  ASSERT_EQ(count_op(qdq, "Gemm"), 2);
  for (const char* backend : {"im2col", "naive"}) {  // no rewrite where the backend lacks it, or on the oracle
    Graph g = qdq;
    fuse_graph(g, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
    EXPECT_EQ(count_op(g, "QGemm"), 0) << backend;
  }
  if (!onednn_has_int8_exact_products()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  Graph fused = qdq;
  fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  ASSERT_EQ(count_op(fused, "QGemm"), 2);
  EXPECT_EQ(count_op(fused, "Gemm"), 0);
  for (const auto& node : fused.nodes) {
    if (node.op_type != "QGemm") continue;
    // B and C are the model's own codes, element for element; a scale per output column.
    const bool first = node.name.rfind("fc1", 0) == 0;
    const Tensor* w = nullptr;
    const Tensor* c = nullptr;
    for (const auto& [name, d] : qdq.dequantized) {
      if (name.rfind(first ? "w1" : "w2", 0) == 0) w = &d.codes;
      if (name.rfind(first ? "c1" : "c2", 0) == 0) c = &d.codes;
    }
    ASSERT_TRUE(w && c) << node.name;
    EXPECT_EQ(node.attr_int("transB", 0), first ? 1 : 0) << node.name;
    const Tensor& wq = fused.initializers.at(node.inputs[3]);
    const Tensor& cq = fused.initializers.at(node.inputs[6]);
    ASSERT_EQ(wq.dtype(), DType::kI8);
    ASSERT_EQ(cq.dtype(), DType::kI32);
    EXPECT_EQ(fused.initializers.at(node.inputs[4]).numel(), first ? 24 : 10) << "a scale per column of B";
    for (int64_t i = 0; i < w->numel(); ++i) ASSERT_EQ(wq.get_i64(i), w->get_i64(i)) << node.name << " weight " << i;
    for (int64_t i = 0; i < c->numel(); ++i) ASSERT_EQ(cq.get_i64(i), c->get_i64(i)) << node.name << " C " << i;
  }
  // fc1 ends in a QuantizeLinear (uint8 out), fc2 in none (float32 out).
  for (const auto& node : fused.nodes) {
    if (node.op_type != "QGemm") continue;
    EXPECT_EQ(node.inputs.size(), node.name.rfind("fc1", 0) == 0 ? 9u : 7u) << node.name;
  }
  // y is float: an r1 code one step off moves it by r1's scale times a weight of fc2 (|w2| <=
  // 0.4); otherwise only the float sums' rounding differs.
  double step = 0;
  for (const auto& node : qdq.nodes)
    if (node.op_type == "QuantizeLinear" && node.inputs[0] == "r1") step = 0.4 * qdq.initializers.at(node.inputs[1]).get(0);
  ASSERT_GT(step, 0);
  const auto [worst, exact] = steps_apart(fused, qdq, x, step, 1e-3);
  std::cout << "[ steps    ] the integer plan within " << worst << " steps of naive's QDQ run, " << 100 * exact
            << "% of the outputs within a thousandth of one\n";
  EXPECT_LE(worst, 2.0001) << "an edge of m1 moves y by at most a step or two";
  EXPECT_GE(exact, 0.9);
}

/// com.microsoft QGemm on every backend that runs it, against values computed by hand: A's
/// zero point, B per column, C added before the scales, alpha, A or B stored transposed, float32
/// or requantised output with an odd zero point on a tie (ONNX rounds before adding it).
TEST(QdqFusion, QGemmByHandOnEveryBackendThatRunsIt) {
  // A - 1 = [[0 1 2] [3 4 6]], B = [[1 -1] [2 0] [-3 4]]: sums [[-4 8] [-7 21]], + C [1 -2].
  struct Variant {
    bool ta, tb, quantised;
    float alpha;
    std::vector<double> want;
  };
  // Float: times alpha * 0.5 * [2 0.25]. Quantised: over 0.25 -> [[-12 3] [-24 9.5]], rounded
  // half to even (9.5 -> 10) before the zero point 11 is added, saturated to uint8.
  const std::vector<Variant> variants = {{false, false, false, 1.f, {-3, 0.75, -6, 2.375}},
                                         {true, true, false, 2.f, {-6, 1.5, -12, 4.75}},
                                         {false, true, true, 1.f, {0, 14, 0, 21}},
                                         {true, false, true, 1.f, {0, 14, 0, 21}}};
  for (const Variant& v : variants) {
    Graph g;
    g.source = "qgemm";
    g.opset = 13;
    g.inputs.push_back(ValueInfo{"a", DType::kU8, v.ta ? Shape{3, 2} : Shape{2, 3}, {}, true});
    g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
    g.initializers["b"] = v.tb ? typed(DType::kI8, {2, 3}, {1, 2, -3, -1, 0, 4}) : typed(DType::kI8, {3, 2}, {1, -1, 2, 0, -3, 4});
    g.initializers["a_scale"] = Tensor::from_f32({}, {0.5f});
    g.initializers["a_zp"] = typed(DType::kU8, {}, {1});
    g.initializers["b_scale"] = Tensor::from_f32({2}, {2.f, 0.25f});
    g.initializers["b_zp"] = typed(DType::kI8, {2}, {0, 0});
    g.initializers["c"] = typed(DType::kI32, {2}, {1, -2});
    g.initializers["y_scale"] = Tensor::from_f32({}, {0.25f});
    g.initializers["y_zp"] = typed(DType::kU8, {}, {11});
    Node n = make_node("QGemm", {{"transA", Attribute::of_int(v.ta)}, {"transB", Attribute::of_int(v.tb)},
                                 {"alpha", Attribute::of_float(v.alpha)}});
    n.domain = "com.microsoft";
    std::vector<std::string> in = {"a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c"};
    if (v.quantised) in.insert(in.end(), {"y_scale", "y_zp"});
    add_node(g, n, in, {"y"}, "qgemm");
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    const Tensor a = v.ta ? typed(DType::kU8, {3, 2}, {1, 4, 2, 5, 3, 7}) : typed(DType::kU8, {2, 3}, {1, 2, 3, 4, 5, 7});
    for (const char* backend : {"naive", "onednn"}) {
      auto plan = Plan::build(g, Placement::all_on(backend, {"naive"}), builtin_registry());
      ASSERT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
      const PlanStep& step = plan.value()->steps().back();
      // B in [-3, 4] fits 7 bits: every CPU's oneDNN int8 path sums it exactly (VNNI or not).
      const bool on_onednn = std::string(backend) == "onednn";
      EXPECT_EQ(step.backend, on_onednn ? "onednn" : "naive") << backend << " " << step.fallback_reason;
      std::vector<Tensor> out;
      ASSERT_TRUE(plan.value()->run({a}, &out).is_ok());
      EXPECT_EQ(values_of(out[0]), v.want) << backend << " transA " << v.ta << " transB " << v.tb;
    }
  }
}

/// bench on a QDQ file (ONNX Runtime's quantiser's form of fmnist-cnn, from the quantised
/// corpus): onednn runs the convolutions as QLinearConv where the CPU sums int8 products
/// exactly, im2col beside it stays float, and both are checked as a quantised model's outputs
/// are, with a note saying so.
TEST(QdqFusion, BenchRunsAQdqFilesConvolutionsInInt8WhereTheBackendCan) {
  const std::string model = std::string(MOSAIC_SOURCE_DIR) + "/tests/corpus/quantised/cases/zoo_fmnist-cnn.qdq/model.onnx";
  const std::string json = (std::filesystem::temp_directory_path() / ("mosaic_qdq_bench_" + std::to_string(getpid()) + ".json")).string();
  CmdResult r = mosaic("bench " + model + " --backends onednn,im2col --batch 4 --warmup 0 --iterations 2 --no-peaks --no-db "
                       "--json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("note: a quantised model: each output is checked within 3% of its scale"), std::string::npos) << r.out;
  const auto doc = read_json(json);
  std::filesystem::remove(json);
  std::map<std::string, int> integer;
  for (const auto& run : doc["runs"])
    for (const auto& n : run["nodes"]) integer[run["label"]] += n["op"] == "QLinearConv";
  EXPECT_EQ(integer["onednn"], onednn_has_int8_exact_products() ? 2 : 0) << r.out;
  EXPECT_EQ(integer["im2col"], 0) << r.out;
}

}  // namespace
}  // namespace mosaic::test
