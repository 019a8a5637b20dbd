// Dynamically quantised products (core/fuse_dynamic.cpp, backends/onednn/int8_matmul.cpp):
// com.microsoft's MatMulIntegerToFloat against hand-computed values, ONNX Runtime's dynamic
// form (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(a_scale * b_scale) [-> Add])
// fused into it where onednn computes it, and onednn's int8 products against the naive
// oracle's run of the chain as written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fuse.hpp"
#include "operators/ms_quantize.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

bool onednn_sums_int8_exactly() {
  const BackendInfo* info = builtin_registry().info("onednn");
  if (!info || !info->properties) return false;
  for (const auto& [key, isa] : info->properties().kernels)
    if (key == "isa") return isa == "avx512_core_vnni" || isa == "avx512_core_bf16" || isa == "avx512_core_amx";
  return false;
}

Tensor int8_codes(const Shape& shape, uint64_t seed) {
  const Tensor r = random_tensor(shape, seed, -127.f, 127.f);
  Tensor t = Tensor::empty({DType::kI8, shape});
  for (int64_t i = 0; i < t.numel(); ++i) static_cast<int8_t*>(t.data())[i] = static_cast<int8_t>(std::lround(r.f32()[i]));
  return t;
}

Tensor scalar_of(DType d, double v) {
  Tensor t = Tensor::empty({d, {}});
  store_f64(d, t.data(), 0, v);
  return t;
}

/// x [2, 6, 40] -> DynamicQuantizeLinear, read by two products in ONNX Runtime's dynamic form:
/// y = (x_q W1) * (x_scale * w1_scale) + b1 (per-tensor weight scale, a bias) and
/// z = (x_q W2) * (x_scale * w2_scale[n]) (a scale per column, no bias), prepared.
Graph dynamic_graph() {
  Graph g;
  g.source = "dynamic-products";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 6, 40}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.outputs.push_back(ValueInfo{"z", DType::kF32, {}, {}, false});
  g.initializers["w1"] = int8_codes({40, 24}, 11);
  g.initializers["w2"] = int8_codes({40, 16}, 12);
  g.initializers["w_zp"] = scalar_of(DType::kI8, 0);
  g.initializers["w1_scale"] = Tensor::from_f32({}, {0.0123f});
  g.initializers["w2_scale"] = random_tensor({16}, 13, 0.001f, 0.02f);
  g.initializers["b1"] = random_tensor({24}, 14, -0.5f, 0.5f);
  add_node(g, make_node("DynamicQuantizeLinear"), {"x"}, {"xq", "xs", "xz"}, "dql");
  add_node(g, make_node("MatMulInteger"), {"xq", "w1", "xz", "w_zp"}, {"acc1"}, "mm1");
  add_node(g, make_node("Cast", {{"to", Attribute::of_int(1)}}), {"acc1"}, {"f1"}, "cast1");
  add_node(g, make_node("Mul"), {"xs", "w1_scale"}, {"s1"}, "scale1");
  add_node(g, make_node("Mul"), {"f1", "s1"}, {"m1"}, "mul1");
  add_node(g, make_node("Add"), {"m1", "b1"}, {"y"}, "add1");
  add_node(g, make_node("MatMulInteger"), {"xq", "w2", "xz", "w_zp"}, {"acc2"}, "mm2");
  add_node(g, make_node("Cast", {{"to", Attribute::of_int(1)}}), {"acc2"}, {"f2"}, "cast2");
  add_node(g, make_node("Mul"), {"w2_scale", "xs"}, {"s2"}, "scale2");
  add_node(g, make_node("Mul"), {"s2", "f2"}, {"z"}, "mul2");
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  return g;
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes) n += node.op_type == op;
  return n;
}

TEST(DynamicProducts, MatMulIntegerToFloatByHandOnEveryBackendThatRunsIt) {
  // A - 1 = [[0 1 2] [3 4 6]]; B's columns less their zero points [1 2 -3], [-1 0 4] (zero
  // points 0) or [-2 -1 3] (zero points [0 1]). Sums: [[-4 8] [-7 21]], or [[-4 5] [-7 8]]
  // with B's zero points; times 0.5 * [2 0.25], plus [1 -1].
  for (const bool b_zero_points : {false, true}) {
    Graph g;
    g.source = "matmul-integer-to-float";
    g.opset = 13;
    g.inputs.push_back(ValueInfo{"a", DType::kU8, {2, 3}, {}, true});
    g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
    Tensor b = Tensor::empty({DType::kI8, {3, 2}});
    const int8_t bv[] = {1, -1, 2, 0, -3, 4};
    for (int i = 0; i < 6; ++i) static_cast<int8_t*>(b.data())[i] = bv[i];
    if (b_zero_points) {  // B - [0 1] per column: column 1 becomes [-2 -1 3]
      Tensor bz = Tensor::empty({DType::kI8, {2}});
      static_cast<int8_t*>(bz.data())[0] = 0;
      static_cast<int8_t*>(bz.data())[1] = 1;
      g.initializers["b_zp"] = bz;
    }
    g.initializers["b"] = b;
    g.initializers["a_scale"] = Tensor::from_f32({}, {0.5f});
    g.initializers["b_scale"] = Tensor::from_f32({2}, {2.f, 0.25f});
    g.initializers["a_zp"] = scalar_of(DType::kU8, 1);
    g.initializers["bias"] = Tensor::from_f32({2}, {1.f, -1.f});
    Node n = make_node("MatMulIntegerToFloat");
    n.domain = kMicrosoftDomain;
    add_node(g, n, {"a", "b", "a_scale", "b_scale", "a_zp", b_zero_points ? "b_zp" : "", "bias"}, {"y"}, "mmf");
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    Tensor a = Tensor::empty({DType::kU8, {2, 3}});
    const uint8_t av[] = {1, 2, 3, 4, 5, 7};
    std::copy(av, av + 6, static_cast<uint8_t*>(a.data()));
    const std::vector<float> want = b_zero_points ? std::vector<float>{-3.f, 0.5f * 0.25f * 5 - 1, -6.f, 0.f}
                                                  : std::vector<float>{-3.f, 0.f, -6.f, 0.5f * 0.25f * 21 - 1};
    for (const char* backend : {"naive", "onednn"}) {
      auto plan = Plan::build(g, Placement::all_on(backend, {"naive"}), builtin_registry());
      ASSERT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
      const PlanStep& step = plan.value()->steps().back();
      // onednn takes it with zero-point-0 weights (B in [-3, 4] fits 7 bits: its int8 sums are
      // exact on every CPU, VNNI or not); else naive runs it.
      const bool on_onednn = std::string(backend) == "onednn" && !b_zero_points;
      EXPECT_EQ(step.backend, on_onednn ? "onednn" : "naive") << backend << " " << step.fallback_reason;
      std::vector<Tensor> out;
      ASSERT_TRUE(plan.value()->run({a}, &out).is_ok());
      for (int i = 0; i < 4; ++i) EXPECT_EQ(out[0].f32()[i], want[static_cast<size_t>(i)]) << backend << " element " << i;
    }
  }
}

TEST(DynamicProducts, OnnxRuntimesDynamicFormFusesOnOnednnAndAgreesWithTheChain) {
  if (!onednn_sums_int8_exactly()) GTEST_SKIP() << "this CPU's oneDNN sums u8 x s8 pairs in int16 (no VNNI)";
  const Graph g = dynamic_graph();
  Graph fused = g;
  const FuseReport r = fuse_graph(fused, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(fused, "MatMulIntegerToFloat"), 2);
  EXPECT_EQ(count_op(fused, "MatMulInteger") + count_op(fused, "Cast") + count_op(fused, "Mul") + count_op(fused, "Add"), 0);
  EXPECT_EQ(count_op(fused, "DynamicQuantizeLinear"), 1) << "shared by both products, it stays";
  EXPECT_NE(std::find(r.fused.begin(), r.fused.end(), "mm1+add1"), r.fused.end());
  EXPECT_NE(std::find(r.fused.begin(), r.fused.end(), "mm2+mul2"), r.fused.end());
  const Tensor x = random_tensor({2, 6, 40}, 15, -2.f, 3.f);
  std::vector<Tensor> got, want;
  auto plan = Plan::build(fused, Placement::all_on("onednn", {}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const auto& step : plan.value()->steps()) EXPECT_EQ(step.backend, "onednn") << step.fallback_reason;
  ASSERT_TRUE(plan.value()->run({x}, &got).is_ok());
  ASSERT_TRUE(Plan::build(g, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
  for (size_t o = 0; o < 2; ++o) {
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < want[o].numel(); ++i) scale = std::max(scale, std::fabs(double{want[o].f32()[i]}));
    for (int64_t i = 0; i < want[o].numel(); ++i)
      worst = std::max(worst, std::fabs(double{got[o].f32()[i]} - want[o].f32()[i]));
    // The same int32 sums and the same float32 roundings; an FMA may round a product and
    // bias sum once where the chain rounds twice: a float32 ulp of the output's scale.
    EXPECT_LE(worst, 2e-7 * scale) << "output " << o;
  }
}

TEST(DynamicProducts, OnlyWhereTheBackendTakesTheFusedNode) {
  // im2col has no MatMulIntegerToFloat, and naive, which has, is the oracle that runs the
  // chain as written; training plans fuse nothing of the kind.
  for (const char* backend : {"im2col", "naive"}) {
    Graph g = dynamic_graph();
    fuse_graph(g, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
    EXPECT_EQ(count_op(g, "MatMulInteger"), 2) << backend;
    EXPECT_EQ(count_op(g, "MatMulIntegerToFloat"), 0) << backend;
  }
  Graph training = dynamic_graph();
  fuse_graph(training, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), true));
  EXPECT_EQ(count_op(training, "MatMulIntegerToFloat"), 0);
  // Weights with a zero point other than 0: onednn declines, the chain stays as it is.
  Graph shifted = dynamic_graph();
  shifted.initializers["w_zp"] = scalar_of(DType::kI8, 3);
  fuse_graph(shifted, fuse_options_for(Placement::all_on("onednn", {}), builtin_registry(), false));
  EXPECT_EQ(count_op(shifted, "MatMulIntegerToFloat"), 0);
  EXPECT_EQ(count_op(shifted, "MatMulInteger"), 2);
}

TEST(DynamicProducts, OnednnMatMulIntegerAndDynamicQuantizeLinearMatchTheOracleExactly) {
  // The chain unfused (the Cast read by a graph output too, so that nothing fuses): onednn's
  // DynamicQuantizeLinear writes naive's codes, scale and zero point, and its MatMulInteger
  // naive's int32 sums, element for element.
  Graph g = dynamic_graph();
  g.outputs.push_back(ValueInfo{"acc1", DType::kI32, {}, {}, false});
  g.outputs.push_back(ValueInfo{"xq", DType::kU8, {}, {}, false});
  g.outputs.push_back(ValueInfo{"xs", DType::kF32, {}, {}, false});
  g.outputs.push_back(ValueInfo{"xz", DType::kU8, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  Tensor x = random_tensor({2, 6, 40}, 16, -1.f, 4.f);
  x.f32()[7] = 0.5f * (x.f32()[3] + x.f32()[5]);
  std::vector<Tensor> got, want;
  // naive behind it: without VNNI, oneDNN declines the 8-bit weights of the MatMulIntegers.
  auto plan = Plan::build(g, Placement::all_on("onednn", {"naive"}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const auto& step : plan.value()->steps()) {
    const std::string& op = plan.value()->graph().nodes[static_cast<size_t>(step.node)].op_type;
    if (op == "DynamicQuantizeLinear" || (op == "MatMulInteger" && onednn_sums_int8_exactly())) {
      EXPECT_EQ(step.backend, "onednn") << op << ": " << step.fallback_reason;
    }
  }
  ASSERT_TRUE(plan.value()->run({x}, &got).is_ok());
  ASSERT_TRUE(Plan::build(g, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
  ASSERT_EQ(got.size(), 6u);
  for (size_t o = 2; o < 6; ++o) {
    ASSERT_EQ(got[o].bytes(), want[o].bytes()) << o;
    EXPECT_EQ(std::memcmp(got[o].data(), want[o].data(), got[o].bytes()), 0) << "output " << o;
  }
}

TEST(DynamicProducts, OnednnDynamicQuantizeLinearOnLargeInputsWithNaNsWritesTheOraclesCodes) {
  // 210,000 values: the threaded, chunked path (more than one 16,384-value chunk per thread),
  // a tail that is no multiple of 16, NaNs (passed over by the range, coded as the zero point),
  // and values that land half-way between two codes.
  Graph g;
  g.source = "dql";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {3, 70001}, {}, true});
  for (const char* v : {"q", "s", "z"}) g.outputs.push_back(ValueInfo{v, DType::kCount, {}, {}, false});
  g.outputs[0].dtype = DType::kU8, g.outputs[1].dtype = DType::kF32, g.outputs[2].dtype = DType::kU8;
  add_node(g, make_node("DynamicQuantizeLinear"), {"x"}, {"q", "s", "z"}, "dql");
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  Tensor x = random_tensor({3, 70001}, 17, -3.f, 5.f);
  x.f32()[5] = 5.5f;                 // the largest, in the first chunk
  x.f32()[210000] = -3.25f;          // the smallest, in the tail
  x.f32()[100] = NAN;
  x.f32()[150000] = NAN;
  const float scale = (5.5f + 3.25f) / 255.f;
  for (int64_t i = 1000; i < 1100; ++i) x.f32()[i] = (static_cast<float>(i - 1050) + 0.5f) * scale;
  std::vector<Tensor> got, want;
  auto plan = Plan::build(g, Placement::all_on("onednn", {}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_TRUE(plan.value()->run({x}, &got).is_ok());
  ASSERT_TRUE(Plan::build(g, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
  EXPECT_EQ(got[1].f32()[0], scale);
  for (size_t o = 0; o < 3; ++o) EXPECT_EQ(std::memcmp(got[o].data(), want[o].data(), got[o].bytes()), 0) << "output " << o;
  EXPECT_EQ(static_cast<const uint8_t*>(got[0].data())[100], static_cast<const uint8_t*>(got[2].data())[0]) << "NaN codes as the zero point";
}

TEST(DynamicProducts, BadScalesAndShapesAreRefusedByName) {
  auto refuse = [](const Shape& b_scale, const Shape& bias, DType a, const std::string& says) {
    Graph g;
    g.source = "bad-mmf";
    g.opset = 13;
    g.inputs.push_back(ValueInfo{"a", a, {2, 3}, {}, true});
    g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
    g.initializers["b"] = int8_codes({3, 4}, 1);
    g.initializers["a_scale"] = Tensor::from_f32({}, {0.5f});
    g.initializers["b_scale"] = random_tensor(b_scale, 2, 0.1f, 0.2f);
    g.initializers["bias"] = random_tensor(bias, 3);
    Node n = make_node("MatMulIntegerToFloat");
    n.domain = kMicrosoftDomain;
    add_node(g, n, {"a", "b", "a_scale", "b_scale", "", "", "bias"}, {"y"}, "mmf");
    const Status s = prepare_graph(g, builtin_registry(), PrepareOptions{}).status();
    EXPECT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("mmf"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
  };
  refuse({3}, {4}, DType::kU8, "b_scale [3] must be one value or one per column of B ([4])");
  refuse({4}, {3}, DType::kU8, "bias [3] must be one per column of B ([4])");
  refuse({4}, {4}, DType::kF32, "A must be int8 or uint8");
  // A zero scale is refused when it is a constant.
  Graph g;
  g.source = "zero-scale";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"a", DType::kU8, {2, 3}, {}, true});
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  g.initializers["b"] = int8_codes({3, 4}, 1);
  g.initializers["a_scale"] = Tensor::from_f32({}, {0.5f});
  g.initializers["b_scale"] = Tensor::from_f32({}, {0.f});
  Node n = make_node("MatMulIntegerToFloat");
  n.domain = kMicrosoftDomain;
  add_node(g, n, {"a", "b", "a_scale", "b_scale"}, {"y"}, "mmf");
  const Status s = prepare_graph(g, builtin_registry(), PrepareOptions{}).status();
  EXPECT_NE(s.message().find("b_scale is 0"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mosaic::test
