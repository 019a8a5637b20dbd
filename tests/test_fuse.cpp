// The fusion pass's pattern rewrites (core/fuse.hpp): PyTorch's pre-opset-17 LayerNorm
// decomposition becomes one LayerNormalization node, and its GELU decompositions one Gelu,
// that compute what the decomposition computes; near misses are left alone.
#include <gtest/gtest.h>

#include <cmath>

#include "api/models.hpp"
#include "api/util.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "metrics/compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

/// x [2, 3, 8] -> the decomposition over the last axis (opset 13: ReduceMean's axes an
/// attribute), optionally times Scale and plus B.
Graph decomposed_layer_norm(bool affine, int64_t axis = -1) {
  Graph g;
  g.source = "layernorm-decomposition";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3, 8}, {}, true});
  g.initializers["two"] = Tensor::from_f32({}, {2.f});
  g.initializers["eps"] = Tensor::from_f32({}, {1e-5f});
  g.initializers["scale"] = random_tensor({8}, 5, 0.5f, 1.5f);
  g.initializers["bias"] = random_tensor({8}, 6);
  const A axes = A::of_ints({axis});
  add_node(g, make_node("ReduceMean", {{"axes", axes}}), {"x"}, {"m"}, "mean");
  add_node(g, make_node("Sub"), {"x", "m"}, {"d"}, "sub");
  add_node(g, make_node("Pow"), {"d", "two"}, {"p"}, "pow");
  add_node(g, make_node("ReduceMean", {{"axes", axes}}), {"p"}, {"v"}, "var");
  add_node(g, make_node("Add"), {"v", "eps"}, {"ve"}, "add_eps");
  add_node(g, make_node("Sqrt"), {"ve"}, {"s"}, "sqrt");
  add_node(g, make_node("Div"), {"d", "s"}, {affine ? "n" : "y"}, "div");
  if (affine) {
    add_node(g, make_node("Mul"), {"n", "scale"}, {"w"}, "mul");
    add_node(g, make_node("Add"), {"w", "bias"}, {"y"}, "add_bias");
  }
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

std::vector<Tensor> run(Graph g, bool fuse, FuseReport* report = nullptr) {
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  if (fuse) {
    FuseReport r = fuse_graph(g);
    if (report) *report = r;
  }
  auto plan = Plan::build(g, Placement::all_on("naive", {}), builtin_registry());
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<Tensor> out;
  if (plan.ok()) {
    EXPECT_TRUE(plan.value()->run({random_tensor({2, 3, 8}, 7, -2.f, 3.f)}, &out).is_ok());
  }
  return out;
}

/// The outputs of `g` on one backend for input x (prepared first unless it is already).
std::vector<Tensor> outputs_on(Graph g, const std::string& backend, const Tensor& x, bool prepared = false) {
  if (!prepared) {
    EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  }
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry());
  EXPECT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
  std::vector<Tensor> out;
  if (plan.ok()) {
    EXPECT_TRUE(plan.value()->run({x}, &out).is_ok()) << backend;
  }
  return out;
}

TEST(FuseLayerNorm, TheDecompositionBecomesOneNodeWithTheSameOutput) {
  for (bool affine : {true, false}) {
    Graph g = decomposed_layer_norm(affine);
    FuseReport report;
    const std::vector<Tensor> fused = run(g, true, &report), plain = run(g, false);
    ASSERT_EQ(report.fused.size(), 1u) << affine;
    EXPECT_EQ(report.fused[0], affine ? "mean+sub+pow+var+add_eps+sqrt+div+mul+add_bias"
                                      : "mean+sub+pow+var+add_eps+sqrt+div");
    Graph f = g;
    ASSERT_TRUE(prepare_graph(f, builtin_registry(), PrepareOptions{}).ok());
    fuse_graph(f);
    ASSERT_EQ(f.nodes.size(), 1u);
    EXPECT_EQ(f.nodes[0].op_type, "LayerNormalization");
    EXPECT_EQ(f.nodes[0].attr_int("axis", 0), 2);
    EXPECT_FLOAT_EQ(f.nodes[0].attr_float("epsilon", 0), 1e-5f);
    EXPECT_EQ(f.nodes[0].inputs.size(), affine ? 3u : 2u);
    ASSERT_EQ(fused.size(), 1u);
    ASSERT_EQ(plain.size(), 1u);
    const Agreement a = compare_tensors(fused[0], plain[0], 1e-5, 1e-6);
    EXPECT_TRUE(a.ok) << a.message << " max_abs " << a.max_abs;
  }
}

TEST(FuseLayerNorm, NearMissesAreLeftAlone) {
  {  // the centred value has a third consumer
    Graph g = decomposed_layer_norm(true);
    add_node(g, make_node("Relu"), {"d"}, {"r"}, "extra");
    g.outputs.push_back(ValueInfo{"r", DType::kF32, {}, {}, false});
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // statistics over a leading axis: not a LayerNorm
    Graph g = decomposed_layer_norm(true, 1);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // a square that is not one: Pow(d, 3)
    Graph g = decomposed_layer_norm(true);
    g.initializers["two"] = Tensor::from_f32({}, {3.f});
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // switched off
    Graph g = decomposed_layer_norm(true);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    FuseOptions o;
    o.layer_norm = false;
    EXPECT_TRUE(fuse_graph(g, o).fused.empty());
  }
}

/// x [2, 3, 8] -> RMSNorm written out as today's exporters write it (opset 18: ReduceMean's
/// axes an input).
enum class RmsForm { kDivByRoot, kReciprocal, kOneOverRoot };
Graph decomposed_rms_norm(RmsForm form, bool cast_and_scale, float two = 2.f) {
  Graph g;
  g.source = "rmsnorm-decomposition";
  g.opset = 18;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3, 8}, {}, true});
  g.initializers["two"] = Tensor::from_f32({}, {two});
  g.initializers["one"] = Tensor::from_f32({}, {1.f});
  g.initializers["eps"] = Tensor::from_f32({}, {1e-6f});
  g.initializers["axes"] = Tensor::from_i64({1}, {-1});
  g.initializers["weight"] = random_tensor({8}, 5, 0.5f, 1.5f);
  add_node(g, make_node("Pow"), {"x", "two"}, {"p"}, "pow");
  add_node(g, make_node("ReduceMean"), {"p", "axes"}, {"v"}, "var");
  add_node(g, make_node("Add"), {"v", "eps"}, {"ve"}, "add_eps");
  add_node(g, make_node("Sqrt"), {"ve"}, {"s"}, "sqrt");
  const std::string n = cast_and_scale ? "n" : "y";
  switch (form) {
    case RmsForm::kDivByRoot: add_node(g, make_node("Div"), {"x", "s"}, {n}, "div"); break;
    case RmsForm::kReciprocal:  // the dynamo exporter's rsqrt
      add_node(g, make_node("Reciprocal"), {"s"}, {"r"}, "rsqrt");
      add_node(g, make_node("Mul"), {"x", "r"}, {n}, "mul");
      break;
    case RmsForm::kOneOverRoot:  // the TorchScript exporter's rsqrt
      add_node(g, make_node("Div"), {"one", "s"}, {"r"}, "rsqrt");
      add_node(g, make_node("Mul"), {"r", "x"}, {n}, "mul");
      break;
  }
  if (cast_and_scale) {  // .to(input_dtype), then the weight
    add_node(g, make_node("Cast", {{"to", A::of_int(1)}}), {"n"}, {"c"}, "cast");
    add_node(g, make_node("Mul"), {"weight", "c"}, {"y"}, "scale");
  }
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

FuseOptions rms_only() {
  FuseOptions o;
  o.rms_norm = [](const Node&) { return true; };
  return o;
}

TEST(FuseRmsNorm, EachFormBecomesOneRmsNormalizationWithTheSameOutput) {
  for (RmsForm form : {RmsForm::kDivByRoot, RmsForm::kReciprocal, RmsForm::kOneOverRoot})
    for (bool cast_and_scale : {true, false}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(form)) + (cast_and_scale ? " with scale" : " without"));
      Graph g = decomposed_rms_norm(form, cast_and_scale);
      Graph f = g;
      ASSERT_TRUE(prepare_graph(f, builtin_registry(), PrepareOptions{}).ok());
      const FuseReport report = fuse_graph(f, rms_only());
      ASSERT_EQ(report.fused.size(), 1u);
      ASSERT_EQ(f.nodes.size(), 1u);
      EXPECT_EQ(f.nodes[0].op_type, "RMSNormalization");
      EXPECT_EQ(f.nodes[0].attr_int("axis", 0), 2);
      EXPECT_FLOAT_EQ(f.nodes[0].attr_float("epsilon", 0), 1e-6f);
      EXPECT_EQ(f.nodes[0].outputs[0], "y");
      // The fused node on each CPU backend against the decomposition on naive.
      const Tensor x = random_tensor({2, 3, 8}, 7, -2.f, 3.f);
      const std::vector<Tensor> plain = outputs_on(g, "naive", x);
      ASSERT_EQ(plain.size(), 1u);
      for (const std::string& backend : builtin_registry().available_backends()) {
        if (!builtin_registry().has_kernel(backend, "RMSNormalization")) continue;
        const std::vector<Tensor> out = outputs_on(f, backend, x, true);
        ASSERT_EQ(out.size(), 1u) << backend;
        const Agreement a = compare_tensors(out[0], plain[0], 1e-5, 1e-6);
        EXPECT_TRUE(a.ok) << backend << ": " << a.message << " max_abs " << a.max_abs;
      }
    }
}

TEST(FuseRmsNorm, NearMissesAreLeftAlone) {
  {  // Pow(x, 3)
    Graph g = decomposed_rms_norm(RmsForm::kReciprocal, true, 3.f);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g, rms_only()).fused.empty());
  }
  {  // the root divides something other than x
    Graph g = decomposed_rms_norm(RmsForm::kDivByRoot, false);
    g.nodes.back().inputs[0] = "p";
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g, rms_only()).fused.empty());
  }
  {  // the mean of squares is read elsewhere too
    Graph g = decomposed_rms_norm(RmsForm::kReciprocal, true);
    g.outputs.push_back(ValueInfo{"v", DType::kF32, {}, {}, false});
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g, rms_only()).fused.empty());
  }
  {  // not asked for (training plans, or a backend without the kernel)
    Graph g = decomposed_rms_norm(RmsForm::kReciprocal, true);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // a scale that is not of the normalised shape: the Mul stays outside
    Graph g = decomposed_rms_norm(RmsForm::kReciprocal, true);
    g.initializers["weight"] = random_tensor({3, 8}, 5, 0.5f, 1.5f);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    const FuseReport r = fuse_graph(g, rms_only());
    ASSERT_EQ(r.fused.size(), 1u);
    EXPECT_EQ(r.fused[0], "pow+var+add_eps+sqrt+rsqrt+mul+cast");
    EXPECT_EQ(g.nodes.back().op_type, "Mul");
  }
}

TEST(FuseSwish, SiluBecomesOneSwishAndFoldsIntoTheConvBeforeIt) {
  // x -> Conv -> c; y = c * Sigmoid(c) (SiLU, as PyTorch exports it); z = Sigmoid(y) * y
  // with the Mul's operands the other way round.
  Graph g;
  g.source = "silu";
  g.opset = 17;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3, 6, 6}, {}, true});
  g.initializers["w"] = random_tensor({4, 3, 3, 3}, 11);
  g.initializers["b"] = random_tensor({4}, 12);
  add_node(g, make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}}), {"x", "w", "b"}, {"c"}, "conv");
  add_node(g, make_node("Sigmoid"), {"c"}, {"s"}, "sig");
  add_node(g, make_node("Mul"), {"c", "s"}, {"y"}, "mul");
  add_node(g, make_node("Sigmoid"), {"y"}, {"s2"}, "sig2");
  add_node(g, make_node("Mul"), {"s2", "y"}, {"z"}, "mul2");
  g.outputs.push_back(ValueInfo{"z", DType::kF32, {}, {}, false});
  const Tensor x = random_tensor({2, 3, 6, 6}, 7, -2.f, 2.f);
  const std::vector<Tensor> plain = outputs_on(g, "naive", x);
  ASSERT_EQ(plain.size(), 1u);
  for (const std::string& backend : builtin_registry().available_backends()) {
    if (!builtin_registry().has_kernel(backend, "Swish")) continue;
    Graph f = g;
    ASSERT_TRUE(prepare_graph(f, builtin_registry(), PrepareOptions{}).ok());
    const FuseReport r = fuse_graph(f, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
    ASSERT_EQ(f.nodes.size(), 2u) << backend;
    EXPECT_EQ(f.nodes[0].op_type, "Conv");
    EXPECT_EQ(f.nodes[0].attr_string("mosaic.activation", ""), "Swish");
    EXPECT_EQ(f.nodes[0].name, "conv+sig+mul");
    EXPECT_EQ(f.nodes[1].op_type, "Swish");
    const std::vector<Tensor> out = outputs_on(f, backend, x, true);
    ASSERT_EQ(out.size(), 1u) << backend;
    const Agreement a = compare_tensors(out[0], plain[0], 1e-5, 1e-6);
    EXPECT_TRUE(a.ok) << backend << ": " << a.message << " max_abs " << a.max_abs;
  }
  {  // Sigmoid(c) times something other than c: left alone
    Graph n = g;
    n.initializers["k"] = Tensor::from_f32({1}, {0.5f});
    n.nodes[2].inputs = {"s", "k"};
    ASSERT_TRUE(prepare_graph(n, builtin_registry(), PrepareOptions{}).ok());
    FuseOptions o;
    o.swish = [](const Node&) { return true; };
    const FuseReport r = fuse_graph(n, o);
    for (const auto& name : r.fused) EXPECT_EQ(name.find("sig+mul"), std::string::npos) << name;
  }
}

/// x [2, 3, 8] -> GELU written out as PyTorch's exporter (or a user) writes it.
enum class GeluForm { kErfDiv, kErfMulHalfFirst, kTanhMulCube, kTanhPowHalfLast };
Graph decomposed_gelu(GeluForm form, float half = 0.5f) {
  Graph g;
  g.source = "gelu-decomposition";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3, 8}, {}, true});
  g.initializers["half"] = Tensor::from_f32({}, {half});
  g.initializers["one"] = Tensor::from_f32({}, {1.f});
  g.initializers["sqrt2"] = Tensor::from_f32({}, {1.41421356f});
  g.initializers["inv_sqrt2"] = Tensor::from_f32({}, {0.70710678f});
  g.initializers["c"] = Tensor::from_f32({}, {0.79788456f});
  g.initializers["a"] = Tensor::from_f32({}, {0.044715f});
  g.initializers["three"] = Tensor::from_f32({}, {3.f});
  switch (form) {
    case GeluForm::kErfDiv:  // torch 1.13: (x * (erf(x / sqrt2) + 1)) * 0.5
      add_node(g, make_node("Div"), {"x", "sqrt2"}, {"u"}, "div");
      add_node(g, make_node("Erf"), {"u"}, {"e"}, "erf");
      add_node(g, make_node("Add"), {"e", "one"}, {"p"}, "add");
      add_node(g, make_node("Mul"), {"x", "p"}, {"xp"}, "mul");
      add_node(g, make_node("Mul"), {"xp", "half"}, {"y"}, "mul_half");
      break;
    case GeluForm::kErfMulHalfFirst:  // HuggingFace: x * 0.5 * (1 + erf(x * 0.7071))
      add_node(g, make_node("Mul"), {"x", "half"}, {"h"}, "mul_half");
      add_node(g, make_node("Mul"), {"inv_sqrt2", "x"}, {"u"}, "scale");
      add_node(g, make_node("Erf"), {"u"}, {"e"}, "erf");
      add_node(g, make_node("Add"), {"one", "e"}, {"p"}, "add");
      add_node(g, make_node("Mul"), {"h", "p"}, {"y"}, "mul");
      break;
    case GeluForm::kTanhMulCube:  // torch 1.13 approximate="tanh"
    case GeluForm::kTanhPowHalfLast:  // gelu_new: x * (0.5 * (1 + tanh(c * (x + a * x^3))))
      if (form == GeluForm::kTanhMulCube) {
        add_node(g, make_node("Mul"), {"x", "x"}, {"sq"}, "sq");
        add_node(g, make_node("Mul"), {"x", "sq"}, {"cube"}, "cube");
      } else {
        add_node(g, make_node("Pow"), {"x", "three"}, {"cube"}, "cube");
      }
      add_node(g, make_node("Mul"), {"a", "cube"}, {"ac"}, "mul_a");
      add_node(g, make_node("Add"), {"x", "ac"}, {"s"}, "add_x");
      add_node(g, make_node("Mul"), {"c", "s"}, {"u"}, "mul_c");
      add_node(g, make_node("Tanh"), {"u"}, {"t"}, "tanh");
      add_node(g, make_node("Add"), {"one", "t"}, {"p"}, "add");
      if (form == GeluForm::kTanhMulCube) {
        add_node(g, make_node("Mul"), {"x", "p"}, {"xp"}, "mul");
        add_node(g, make_node("Mul"), {"half", "xp"}, {"y"}, "mul_half");
      } else {
        add_node(g, make_node("Mul"), {"p", "half"}, {"ph"}, "mul_half");
        add_node(g, make_node("Mul"), {"x", "ph"}, {"y"}, "mul");
      }
      break;
  }
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

TEST(FuseGelu, EachFormBecomesOneGeluWithTheSameOutput) {
  const Tensor x = random_tensor({2, 3, 8}, 7, -2.f, 3.f);  // run()'s input
  for (GeluForm form : {GeluForm::kErfDiv, GeluForm::kErfMulHalfFirst, GeluForm::kTanhMulCube,
                        GeluForm::kTanhPowHalfLast}) {
    const bool tanh = form == GeluForm::kTanhMulCube || form == GeluForm::kTanhPowHalfLast;
    Graph g = decomposed_gelu(form);
    FuseReport report;
    const std::vector<Tensor> fused = run(g, true, &report), plain = run(g, false);
    ASSERT_EQ(report.fused.size(), 1u) << static_cast<int>(form);
    Graph f = g;
    ASSERT_TRUE(prepare_graph(f, builtin_registry(), PrepareOptions{}).ok());
    fuse_graph(f);
    ASSERT_EQ(f.nodes.size(), 1u);
    EXPECT_EQ(f.nodes[0].op_type, "Gelu");
    EXPECT_EQ(f.nodes[0].inputs, std::vector<std::string>{"x"});
    EXPECT_EQ(f.nodes[0].attr_string("approximate", ""), tanh ? "tanh" : "none");
    ASSERT_EQ(fused.size(), 1u);
    ASSERT_EQ(plain.size(), 1u);
    const Agreement a = compare_tensors(fused[0], plain[0], 1e-5, 1e-6);
    EXPECT_TRUE(a.ok) << a.message;
    for (int64_t i = 0; i < x.numel(); ++i) {  // and the formula, by hand
      const double v = x.f32()[i];
      const double want = tanh ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                               : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      EXPECT_NEAR(fused[0].f32()[i], want, 1e-5) << i;
    }
  }
}

TEST(FuseGelu, NearMissesAreLeftAlone) {
  {  // 0.6 is not one half
    Graph g = decomposed_gelu(GeluForm::kErfDiv, 0.6f);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // erf's output is read twice
    Graph g = decomposed_gelu(GeluForm::kErfDiv);
    add_node(g, make_node("Relu"), {"e"}, {"r"}, "extra");
    g.outputs.push_back(ValueInfo{"r", DType::kF32, {}, {}, false});
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // the cube is x^2
    Graph g = decomposed_gelu(GeluForm::kTanhPowHalfLast);
    g.initializers["three"] = Tensor::from_f32({}, {2.f});
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    EXPECT_TRUE(fuse_graph(g).fused.empty());
  }
  {  // switched off
    Graph g = decomposed_gelu(GeluForm::kTanhMulCube);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    FuseOptions o;
    o.gelu = false;
    EXPECT_TRUE(fuse_graph(g, o).fused.empty());
  }
}

/// x [2, 3, 7, 7] -> [Relu] -> Pad (1 on each spatial side, opset 13) -> the pool. Graph
/// outputs: the pool's.
Graph pad_then_pool(const std::string& pool, bool relu, std::map<std::string, A> attrs) {
  Graph g;
  g.source = "pad-pool";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3, 7, 7}, {}, true});
  g.initializers["pads"] = Tensor::from_i64({8}, {0, 0, 1, 1, 0, 0, 1, 1});
  if (relu) add_node(g, make_node("Relu"), {"x"}, {"r"}, "relu");
  add_node(g, make_node("Pad", {{"mode", A::of_string("constant")}}), {relu ? "r" : "x", "pads"}, {"p"}, "pad");
  attrs["kernel_shape"] = A::of_ints({3, 3});
  attrs["strides"] = A::of_ints({2, 2});
  add_node(g, make_node(pool, attrs), {"p"}, {"y"}, "pool");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

/// The graph's output for `x` on every backend that can run here (a process whose filter
/// names cuda or torch has that plugin loaded; cuda is unavailable without a GPU), fused as
/// `fo` says, against naive's on the graph as built, within `rtol` and `atol`; returns the
/// fused node names.
std::vector<std::string> fused_agrees(const Graph& built, const FuseOptions& fo, const Tensor& x, double rtol = 1e-5,
                                      double atol = 1e-6) {
  Graph ref = built;
  EXPECT_TRUE(prepare_graph(ref, builtin_registry(), PrepareOptions{}).ok());
  auto want_plan = Plan::build(ref, Placement::all_on("naive", {}), builtin_registry());
  EXPECT_TRUE(want_plan.ok());
  std::vector<Tensor> want;
  if (!want_plan.ok() || !want_plan.value()->run({x}, &want).is_ok()) return {};
  Graph g = built;
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  const FuseReport report = fuse_graph(g, fo);
  for (const auto& backend : builtin_registry().available_backends()) {
    auto plan = Plan::build(g, Placement::all_on(backend, {"naive"}), builtin_registry());
    EXPECT_TRUE(plan.ok()) << backend << " " << plan.status().to_string();
    std::vector<Tensor> got;
    if (!plan.ok() || !plan.value()->run({x}, &got).is_ok()) continue;
    const Agreement a = compare_tensors(got[0], want[0], rtol, atol);
    EXPECT_TRUE(a.ok) << backend << ": " << a.message;
  }
  return report.fused;
}

std::vector<std::string> fused_pool_agrees(const Graph& built, const FuseOptions& fo) {
  return fused_agrees(built, fo, random_tensor({2, 3, 7, 7}, 3, -2.f, 2.f));
}

/// x [2, 4, 6, 6] -> Conv (3x3, 6 filters, pads 1, with or without a bias) -> BatchNormalization
/// (random scale, shift, mean and a positive variance) -> Relu -> y, opset 15.
Graph conv_bn_relu(bool bias, std::map<std::string, A> bn_attrs = {}) {
  Graph g;
  g.source = "conv-bn";
  g.opset = 15;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 4, 6, 6}, {}, true});
  g.initializers["w"] = random_tensor({6, 4, 3, 3}, 11);
  if (bias) g.initializers["b"] = random_tensor({6}, 12);
  g.initializers["scale"] = random_tensor({6}, 13, 0.5f, 2.f);
  g.initializers["shift"] = random_tensor({6}, 14);
  g.initializers["mean"] = random_tensor({6}, 15);
  g.initializers["var"] = random_tensor({6}, 16, 0.1f, 3.f);
  add_node(g, make_node("Conv", {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}}),
           bias ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"}, {"c"}, "conv");
  add_node(g, make_node("BatchNormalization", bn_attrs), {"c", "scale", "shift", "mean", "var"}, {"n"}, "bn");
  add_node(g, make_node("Relu"), {"n"}, {"y"}, "relu");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

// Inference folds the normalisation into the convolution's weights and bias (and the Relu
// then into the convolution): one node, the same outputs on every backend as naive's on the
// unfused graph, and the replaced constants gone.
TEST(FuseBatchNorm, ItFoldsIntoTheConvolutionBeforeItAndTheReluFollows) {
  const Tensor x = random_tensor({2, 4, 6, 6}, 17, -2.f, 2.f);
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with a bias" : "without a bias");
    // Within the check's tolerance: the folded weights round differently.
    EXPECT_EQ(fused_agrees(conv_bn_relu(bias), FuseOptions{}, x, 1e-4, 1e-5), std::vector<std::string>{"conv+bn+relu"});
    Graph g = conv_bn_relu(bias);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    fuse_graph(g, FuseOptions{});
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].attr_string("mosaic.activation", ""), "Relu");
    ASSERT_EQ(g.nodes[0].inputs.size(), 3u);
    EXPECT_EQ(g.nodes[0].inputs[1], "conv.folded_weight");
    EXPECT_EQ(g.nodes[0].inputs[2], "conv.folded_bias");
    for (const char* gone : {"w", "b", "scale", "shift", "mean", "var"}) EXPECT_EQ(g.initializers.count(gone), 0u) << gone;
  }
}

TEST(FuseBatchNorm, NotInTrainingNorWhereItCouldChangeOrIsReadTwice) {
  const Tensor x = random_tensor({2, 4, 6, 6}, 18, -2.f, 2.f);
  FuseOptions training;
  training.activations = training.batch_norm = false;
  EXPECT_TRUE(fused_agrees(conv_bn_relu(true), training, x).empty());
  // The BatchNormalization in training mode (opset 14 and later), or weights a graph input
  // may replace at run time: left as they are.
  Graph training_mode = conv_bn_relu(true, {{"training_mode", A::of_int(1)}});
  Graph fed = conv_bn_relu(true);
  fed.inputs.push_back(ValueInfo{"w", DType::kF32, {6, 4, 3, 3}, {}, false});
  for (Graph* g : {&training_mode, &fed}) {
    fuse_graph(*g, FuseOptions{});
    ASSERT_EQ(g->nodes.size(), 3u);
    EXPECT_EQ(g->nodes[1].op_type, "BatchNormalization");
    EXPECT_EQ(g->nodes[0].inputs[1], "w");
  }
  {  // the convolution's output read by another node too
    Graph g = conv_bn_relu(true);
    add_node(g, make_node("Sigmoid"), {"c"}, {"z"}, "side");
    g.outputs.push_back(ValueInfo{"z", DType::kF32, {}, {}, false});
    EXPECT_TRUE(fused_agrees(g, FuseOptions{}, x).empty());
  }
}

/// fold_batch_norms on a graph as loaded (what `mosaic quantize` runs before it quantises):
/// the normalisation gone into the convolution's weights and bias, the outputs naive gives
/// within the folded weights' rounding, the replaced constants dropped; nothing folds where the
/// plans' fusion would not fold either.
TEST(FuseBatchNorm, FoldBatchNormsFoldsAGraphAsLoaded) {
  const Tensor x = random_tensor({2, 4, 6, 6}, 19, -2.f, 2.f);
  Graph folded = conv_bn_relu(true);
  EXPECT_EQ(fold_batch_norms(folded), 1);
  ASSERT_EQ(folded.nodes.size(), 2u);
  EXPECT_EQ(folded.nodes[0].op_type, "Conv");
  EXPECT_EQ(folded.nodes[0].outputs[0], "n") << "the convolution now writes what the normalisation wrote";
  for (const char* gone : {"w", "b", "scale", "shift", "mean", "var"}) EXPECT_EQ(folded.initializers.count(gone), 0u) << gone;
  Graph original = conv_bn_relu(true);
  ASSERT_TRUE(prepare_graph(original, builtin_registry(), PrepareOptions{}).ok());
  ASSERT_TRUE(prepare_graph(folded, builtin_registry(), PrepareOptions{}).ok());
  std::vector<Tensor> want, got;
  ASSERT_TRUE(Plan::build(original, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &want).is_ok());
  ASSERT_TRUE(Plan::build(folded, Placement::all_on("naive", {}), builtin_registry()).value()->run({x}, &got).is_ok());
  for (int64_t i = 0; i < want[0].numel(); ++i)
    ASSERT_NEAR(got[0].f32()[i], want[0].f32()[i], 1e-4 * (1 + std::fabs(want[0].f32()[i]))) << i;
  Graph training_mode = conv_bn_relu(true, {{"training_mode", A::of_int(1)}});
  EXPECT_EQ(fold_batch_norms(training_mode), 0);
  Graph read_twice = conv_bn_relu(true);
  add_node(read_twice, make_node("Sigmoid"), {"c"}, {"z"}, "side");
  EXPECT_EQ(fold_batch_norms(read_twice), 0);
}

// A fully connected layer at batch 1 with its activation fused (the CPU backends compute it
// as a row GEMV, backends/common/gemv.hpp): ONNX's weights stored [N, K] (transB, read in
// place) or [K, N] (transposed once), C of N values or one; every backend against naive on
// the unfused graph.
TEST(FuseActivation, ABatchOneFullyConnectedLayerAndItsActivationMatchNaive) {
  for (bool trans_b : {true, false})
    for (int64_t c_size : {int64_t{203}, int64_t{1}}) {
      SCOPED_TRACE(std::string(trans_b ? "transB" : "B [K, N]") + ", C of " + std::to_string(c_size));
      Graph g;
      g.source = "fc-relu";
      g.inputs.push_back(ValueInfo{"x", DType::kF32, {1, 517}, {}, true});
      g.initializers["w"] = random_tensor(trans_b ? Shape{203, 517} : Shape{517, 203}, 21);
      g.initializers["c"] = random_tensor({c_size}, 22);
      add_node(g, make_node("Gemm", {{"transB", A::of_int(trans_b ? 1 : 0)}, {"alpha", A::of_float(0.75f)}}),
               {"x", "w", "c"}, {"h"}, "fc");
      add_node(g, make_node("LeakyRelu", {{"alpha", A::of_float(0.1f)}}), {"h"}, {"y"}, "act");
      g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
      EXPECT_EQ(fused_agrees(g, FuseOptions{}, random_tensor({1, 517}, 23), 1e-4, 1e-5),
                std::vector<std::string>{"fc+act"});
    }
}

// VGG16-CIFAR's tail at batch 16: a 3x3 convolution from 4x4 to 2x2 maps, two padded 3x3
// convolutions on the 2x2 maps (onednn, im2col: dense matrix products, conv_dense.hpp) reading and
// writing its NHWC layout between them, and a pool; every backend against naive.
TEST(FuseActivation, SmallMapConvolutionsInAChainMatchNaive) {
  Graph g;
  g.source = "small-maps";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {16, 8, 4, 4}, {}, true});
  const std::map<std::string, A> same{{"pads", A::of_ints({1, 1, 1, 1})}};
  const char* names[] = {"a", "b", "c"};
  std::string in = "x";
  for (int i = 0; i < 3; ++i) {
    const std::string n = names[i];
    g.initializers[n + ".w"] = random_tensor({12, i == 0 ? 8 : 12, 3, 3}, 31 + i, -0.3f, 0.3f);
    g.initializers[n + ".b"] = random_tensor({12}, 41 + i);
    add_node(g, make_node("Conv", i == 0 ? std::map<std::string, A>{} : same), {in, n + ".w", n + ".b"}, {n + ".c"}, n);
    add_node(g, make_node("Relu"), {n + ".c"}, {n + ".r"}, n + "_relu");
    in = n + ".r";
  }
  add_node(g, make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}}), {in}, {"y"}, "pool");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  EXPECT_EQ(fused_agrees(g, FuseOptions{}, random_tensor({16, 8, 4, 4}, 30), 1e-4, 1e-5),
            (std::vector<std::string>{"a+a_relu", "b+b_relu", "c+c_relu"}));
}

// Max pools on onednn's channel blocks (backends/common/pooling.cpp's loop, not oneDNN's
// primitive): 12 channels (a block of 8 and one half padded), a 2x2 pool whose output stays
// blocked for the next convolution, a 3x3 stride-2 pool on odd maps written plain for the graph
// output, and a 2x2 pool on the plain input; every backend against naive.
TEST(FuseActivation, MaxPoolsOnChannelBlocksMatchNaive) {
  Graph g;
  g.source = "pool-blocks";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {3, 4, 22, 19}, {}, true});
  add_node(g, make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}}), {"x"},
           {"p0"}, "pool0");
  const std::map<std::string, A> same{{"pads", A::of_ints({1, 1, 1, 1})}};
  g.initializers["a.w"] = random_tensor({12, 4, 3, 3}, 51, -0.3f, 0.3f);
  g.initializers["b.w"] = random_tensor({12, 12, 3, 3}, 52, -0.3f, 0.3f);
  add_node(g, make_node("Conv", same), {"p0", "a.w"}, {"a"}, "conva");
  add_node(g, make_node("MaxPool", {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}}), {"a"},
           {"p1"}, "pool1");
  add_node(g, make_node("Conv", same), {"p1", "b.w"}, {"b"}, "convb");
  add_node(g, make_node("MaxPool", {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}}), {"b"},
           {"y"}, "pool2");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  EXPECT_TRUE(fused_agrees(g, FuseOptions{}, random_tensor({3, 4, 22, 19}, 50, -2.f, 2.f)).empty());
  // The blocked path ran: pool1 hands convb its blocks; pool2 writes the plain output.
  Graph p = g;
  ASSERT_TRUE(prepare_graph(p, builtin_registry(), PrepareOptions{}).ok());
  auto plan = Plan::build(p, Placement::all_on("onednn", {}), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  for (const auto& step : plan.value()->steps()) {
    const std::string& name = plan.value()->node(step).name;
    if (name == "pool1") {
      EXPECT_NE(step.kernel->output_layout(0), nullptr);
    } else if (name == "pool2" || name == "pool0") {
      EXPECT_EQ(step.kernel->output_layout(0), nullptr);
    }
  }
}

TEST(FusePadPool, ZeroPaddingBeforeAPoolBecomesThePoolsOwnWhereThatIsExact) {
  FuseOptions inference;  // activations on: an inference plan
  FuseOptions training;
  training.activations = false;
  // MaxPool after a ReLU: folded (-inf and 0 padding give the same maxima of non-negative values).
  EXPECT_EQ(fused_pool_agrees(pad_then_pool("MaxPool", true, {}), inference), std::vector<std::string>{"pad+pool"});
  Graph g = pad_then_pool("MaxPool", true, {});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  fuse_graph(g, inference);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].attr_ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));
  // ... not on values that may be negative (a padded 0 would beat them), not in training.
  EXPECT_TRUE(fused_pool_agrees(pad_then_pool("MaxPool", false, {}), inference).empty());
  EXPECT_TRUE(fused_pool_agrees(pad_then_pool("MaxPool", true, {}), training).empty());
  // ... not with ceil_mode, nor where a window could hold padding only.
  EXPECT_TRUE(fused_pool_agrees(pad_then_pool("MaxPool", true, {{"ceil_mode", A::of_int(1)}}), inference).empty());
  EXPECT_TRUE(fused_pool_agrees(pad_then_pool("MaxPool", true, {{"pads", A::of_ints({2, 2, 2, 2})}}), inference).empty());
  // AveragePool counts the zeros: folded with count_include_pad, in training too.
  for (const FuseOptions& fo : {inference, training}) {
    EXPECT_EQ(fused_pool_agrees(pad_then_pool("AveragePool", false, {}), fo), std::vector<std::string>{"pad+pool"});
    EXPECT_EQ(fused_pool_agrees(pad_then_pool("AveragePool", false, {{"pads", A::of_ints({1, 0, 1, 0})},
                                                                      {"count_include_pad", A::of_int(1)}}), fo),
              std::vector<std::string>{"pad+pool"});
  }
  // ... but not where the pool's own pads are not counted (the denominators would differ).
  EXPECT_TRUE(fused_pool_agrees(pad_then_pool("AveragePool", false, {{"pads", A::of_ints({1, 0, 1, 0})}}), inference).empty());
}

// A placement that puts an activation (or a Pad) on another backend than its producer keeps the
// two apart: the node runs where it was assigned instead of vanishing into a fused onednn
// convolution (found when `assign="Relu=python"` was silently ignored).
TEST(FusePlacement, NodesPlacedOnDifferentBackendsStayApart) {
  auto names = [](const Graph& g) {
    std::vector<std::string> n;
    for (const auto& node : g.nodes) n.push_back(node.name);
    return n;
  };
  auto fused = [&](const std::string& assign) {
    auto g = api::load_prepared("zoo:fmnist-cnn", {}, nullptr);
    EXPECT_TRUE(g.ok());
    auto placement = api::assign_placement(assign, {"naive"});
    EXPECT_TRUE(placement.ok()) << placement.status().to_string();
    fuse_graph(g.value(), fuse_options_for(placement.value(), builtin_registry(), false));
    return names(g.value());
  };
  const auto one_backend = fused("*=onednn");
  EXPECT_NE(std::find(one_backend.begin(), one_backend.end(), "conv1+relu1"), one_backend.end());
  const auto relu_apart = fused("Relu=naive,*=onednn");
  for (const char* n : {"conv1", "relu1", "conv2", "relu2", "fc1", "relu3"})
    EXPECT_NE(std::find(relu_apart.begin(), relu_apart.end(), n), relu_apart.end()) << n;
  // By node name: only that pair stays apart.
  const auto by_name = fused("@relu2=naive,*=onednn");
  EXPECT_NE(std::find(by_name.begin(), by_name.end(), "conv1+relu1"), by_name.end());
  EXPECT_NE(std::find(by_name.begin(), by_name.end(), "relu2"), by_name.end());
  // A consumer the default places follows its producer's rule (a fused node follows its
  // first named part): conv1+relu1 stays fused and runs on onednn.
  const auto follows = fused("@conv1=onednn,*=naive");
  EXPECT_NE(std::find(follows.begin(), follows.end(), "conv1+relu1"), follows.end());
  // One graph fused for several placements (bench's configurations): apart where any differs.
  FuseOptions fo;
  auto a = api::assign_placement("*=onednn", {"naive"});
  auto b = api::assign_placement("Relu=naive,*=onednn", {"naive"});
  ASSERT_TRUE(a.ok() && b.ok());
  fo.apart = apart_in({a.value(), b.value()});
  auto g = api::load_prepared("zoo:fmnist-cnn", {}, nullptr);
  ASSERT_TRUE(g.ok());
  fuse_graph(g.value(), fo);
  const auto both = names(g.value());
  EXPECT_NE(std::find(both.begin(), both.end(), "relu1"), both.end());
}

}  // namespace
}  // namespace mosaic::test
