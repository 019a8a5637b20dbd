// --precision bf16: onednn's convolutions and matrix products on bfloat16 inputs and weights,
// checked against the float32 oracle within kBf16Tolerance, side by side with float32; every
// other backend and a CPU without bfloat16 dot products decline with the reason. Mixed-precision
// training: the backward passes on bfloat16 copies, float32 parameters, bench's check of the
// gradients (relative L2 within kBf16GradientTolerance), and train's top-1 agreement.
#include <gtest/gtest.h>

#include <filesystem>

#include "api/bench.hpp"
#include "api/models.hpp"
#include "backends/registry.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "ir/elements.hpp"
#include "metrics/compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using nlohmann::json;

/// Each test's files in a scratch directory of its own.
class Precision : public ScratchDirTest {
 protected:
  Precision() : ScratchDirTest("mosaic_precision_") {}
};

bool onednn_has_bf16() {
  const BackendInfo* info = builtin_registry().info("onednn");
  return info && precision_declined(*info, mosaic::Precision::kBF16).empty();
}

/// x [4, 64] -> Gemm with constant weights [64, 32] -> MatMul by a constant [32, 16]: both
/// kernels that read bf16 copies.
Graph gemm_matmul() {
  Graph g;
  g.source = "gemm-matmul";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {4, 64}, {}, true});
  g.initializers["w"] = random_tensor({64, 32}, 2, -1.f, 1.f);
  g.initializers["b"] = random_tensor({32}, 3, -1.f, 1.f);
  g.initializers["m"] = random_tensor({32, 16}, 4, -1.f, 1.f);
  add_node(g, make_node("Gemm"), {"x", "w", "b"}, {"h"}, "fc");
  add_node(g, make_node("MatMul"), {"h", "m"}, {"y"}, "mm");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

TEST_F(Precision, Bf16PlansRoundTheirInputsAndStayWithinTheTolerance) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  Graph g = gemm_matmul();
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  const Tensor x = random_tensor({4, 64}, 1, -1.f, 1.f);
  auto output = [&](const std::string& backend, mosaic::Precision p) {
    PlanOptions po;
    po.precision = p;
    auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
    EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    std::vector<Tensor> out;
    if (plan.ok()) {
      EXPECT_TRUE(plan.value()->run({x}, &out).is_ok());
    }
    return out.empty() ? Tensor() : out[0];
  };
  const Tensor ref = output("naive", mosaic::Precision::kF32), f32 = output("onednn", mosaic::Precision::kF32),
               bf16 = output("onednn", mosaic::Precision::kBF16);
  ASSERT_TRUE(ref.defined() && f32.defined() && bf16.defined());
  const double scale = max_abs(ref);
  const Agreement a32 = compare_tensors(f32, ref, 0, 1e9), a16 = compare_tensors(bf16, ref, 0, 1e9);
  // bfloat16 keeps 8 significant bits: the error is far above float32's, and far below the tolerance.
  EXPECT_LT(a32.max_abs, 1e-5 * scale);
  EXPECT_GT(a16.max_abs, 1e-4 * scale) << "the bf16 plan computed in float32";
  EXPECT_LT(a16.max_abs, api::kBf16Tolerance * scale);
  EXPECT_EQ(top1_agreement(ref, ref), 1.0);
}

/// A decoder's step in a bf16 plan: products of 1 and 5 rows by constant weights (a Gemm with
/// a bias, a MatMul; above the small-product loop's size) run on bfloat16 panels
/// (common/gemv.hpp) and must be the float32 products of the operands rounded to bfloat16
/// (nearest even), A included, the bias added in float32: oneDNN's bf16 arithmetic.
TEST_F(Precision, Bf16FewRowsProductsAreTheProductsOfTheRoundedOperands) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  auto round16 = [](float v) { return static_cast<double>(bf16_to_f32(f32_to_bf16(v))); };
  const int64_t k = 512, n = 384;
  for (const char* op : {"Gemm", "MatMul"})
    for (int64_t rows : {1, 5}) {
      SCOPED_TRACE(std::string(op) + ", " + std::to_string(rows) + " rows");
      Graph g;
      g.source = "bf16-rows";
      g.opset = 13;
      g.inputs.push_back(ValueInfo{"x", DType::kF32, {rows, k}, {}, true});
      g.initializers["w"] = random_tensor({k, n}, 2, -1.f, 1.f);
      g.initializers["b"] = random_tensor({n}, 3, -1.f, 1.f);
      const bool gemm = std::string(op) == "Gemm";
      add_node(g, make_node(op), gemm ? std::vector<std::string>{"x", "w", "b"} : std::vector<std::string>{"x", "w"},
               {"y"}, "fc");
      g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
      const Tensor w = g.initializers.at("w").clone(), b = g.initializers.at("b").clone();
      ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
      const Tensor x = random_tensor({rows, k}, 7, -1.f, 1.f);
      PlanOptions po;
      po.precision = mosaic::Precision::kBF16;
      auto plan = Plan::build(g, Placement::all_on("onednn", {}), builtin_registry(), po);
      ASSERT_TRUE(plan.ok()) << plan.status().to_string();
      std::vector<Tensor> out;
      ASSERT_TRUE(plan.value()->run({x}, &out).is_ok());
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double s = gemm ? b.f32()[j] : 0.0;
          for (int64_t p = 0; p < k; ++p) s += round16(x.f32()[r * k + p]) * round16(w.f32()[p * n + j]);
          worst = std::max(worst, std::abs(out[0].f32()[r * n + j] - s));
        }
      // float32 sums of 512 products below 1: about 1e-5; one weight or input off by a
      // bfloat16 step moves an output by up to 2^-8.
      EXPECT_LT(worst, 1e-4);
    }
}

TEST_F(Precision, BackendsTrainingAndCpusWithoutBf16Decline) {
  Graph g = gemm_matmul();
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  PlanOptions po;
  po.precision = mosaic::Precision::kBF16;
  for (const std::string backend : {"naive", "im2col"}) {
    auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
    ASSERT_FALSE(plan.ok()) << backend;
    EXPECT_NE(plan.status().message().find("backend " + backend + " declines --precision bf16: it computes in float32 only"),
              std::string::npos)
        << plan.status().message();
  }
  po.training = true;  // training plans decline likewise
  auto plan = Plan::build(g, Placement::all_on("naive", {}), builtin_registry(), po);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("backend naive declines --precision bf16"), std::string::npos)
      << plan.status().message();
  EXPECT_FALSE(parse_precision("int4").ok());
  EXPECT_EQ(parse_precision("bfloat16").value(), mosaic::Precision::kBF16);
  // The CLI: refused before any timing, with the reason; a CPU capped below bfloat16 (oneDNN's
  // ONEDNN_MAX_CPU_ISA) declines as one without it would.
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backends naive,im2col --precision bf16 --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no configuration can compute in bf16: naive (it computes in float32 only); im2col (it computes "
                       "in float32 only)"),
            std::string::npos)
      << r.out;
  r = mosaic_shell("ONEDNN_MAX_CPU_ISA=AVX512_CORE " + std::string(MOSAIC_BIN) +
                   " bench zoo:fmnist-cnn --backends onednn --precision bf16 --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("without bfloat16 dot products"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --assign auto --precision bf16 --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the automatic placement chooses in float32"), std::string::npos) << r.out;
  r = mosaic("train zoo:fmnist-cnn --backend naive --precision bf16 --steps 1 --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("backend naive declines --precision bf16"), std::string::npos) << r.out;
  r = mosaic("train zoo:fmnist-cnn --backend onednn --precision half --steps 1 --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --backends onednn --precision fp8 --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  // tf32 is the cuda backend's (its GPU run: CudaBackend.OnAGpuModelsMatchNaive): every host
  // backend declines it by name, oneDNN too where it takes bf16.
  EXPECT_EQ(parse_precision("tf32").value(), mosaic::Precision::kTF32);
  EXPECT_STREQ(precision_name(mosaic::Precision::kTF32), "tf32");
  // fp16 likewise (the cuda backend's: CudaBackend.OnAGpuFloat16ProductsFollowFloat32), under
  // each of its names; it times inference only (float16 gradients need loss scaling).
  for (const char* name : {"fp16", "f16", "float16", "half"})
    EXPECT_EQ(parse_precision(name).value(), mosaic::Precision::kF16) << name;
  EXPECT_STREQ(precision_name(mosaic::Precision::kF16), "fp16");
  EXPECT_NE(parse_precision("fp8").status().message().find("(f32, bf16, tf32 or fp16)"), std::string::npos);
  for (const std::string p : {"tf32", "fp16"}) {
    r = mosaic("bench zoo:fmnist-cnn --backends naive,onednn --precision " + p + " --no-db --no-peaks");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("no configuration can compute in " + p + ": naive (it computes in float32 only); onednn (oneDNN "
                         "here computes in float32 or bf16, not " + p + ")"),
              std::string::npos)
        << r.out;
  }
  r = mosaic("bench zoo:fmnist-cnn --backends onednn --precision fp16 --mode training --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--precision fp16 times inference"), std::string::npos) << r.out;
}

TEST_F(Precision, BenchBothTimesBf16BesideFloat32WithItsError) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  const std::string out = path("bench.json");
  CmdResult r = mosaic("bench zoo:alexnet-cifar --backends naive,onednn --precision both --batch 8 --iterations 3 "
                       "--warmup 1 --no-db --no-peaks --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("bf16 declined by naive (it computes in float32 only): float32 only"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check:   bf16 within 3% of naive's float32 outputs"), std::string::npos) << r.out;
  const json j = read_json(out);
  std::filesystem::remove(out);
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][2]["label"], "onednn-bf16");
  EXPECT_EQ(j["runs"][2]["precision"], "bf16");
  EXPECT_EQ(j["runs"][1]["precision"], "f32");
  EXPECT_TRUE(j["runs"][2]["check"]["passed"].get<bool>());
  EXPECT_GT(j["runs"][2]["check"]["max_abs_error"].get<double>(), 10 * j["runs"][1]["check"]["max_abs_error"].get<double>());
  EXPECT_GE(j["runs"][2]["check"]["top1_agreement"].get<double>(), 0.75);
  // bf16 alone: the declining backend is left out, the other runs in bf16 (its error says so).
  r = mosaic("bench zoo:alexnet-cifar --backends onednn,naive --precision bf16 --batch 8 --iterations 3 --warmup 1 "
             "--no-db --no-peaks --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("bf16 declined by naive (it computes in float32 only): left out"), std::string::npos) << r.out;
  const json k = read_json(out);
  std::filesystem::remove(out);
  ASSERT_EQ(k["runs"].size(), 1u);
  EXPECT_EQ(k["runs"][0]["label"], "onednn-bf16");
  EXPECT_EQ(k["runs"][0]["precision"], "bf16");
  EXPECT_GT(k["runs"][0]["check"]["max_abs_error"].get<double>(), 10 * j["runs"][1]["check"]["max_abs_error"].get<double>());
}


/// One training forward and backward of `g` with `seed` as the output's gradient: the
/// parameters' gradients and the input's, in parameter order then the input.
std::vector<std::pair<std::string, Tensor>> bf16_gradients(const Graph& g, const std::string& backend, mosaic::Precision p,
                                                           const Tensor& x, const Tensor& seed) {
  PlanOptions po;
  po.training = true;
  po.input_grads = true;
  po.precision = p;
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
  EXPECT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<std::pair<std::string, Tensor>> out;
  if (!plan.ok()) return out;
  EXPECT_TRUE(plan.value()->run({x}, nullptr).is_ok());
  EXPECT_TRUE(plan.value()->backward({seed}).is_ok());
  for (const auto& prm : plan.value()->parameters()) out.emplace_back(prm.name, prm.grad.clone());
  out.emplace_back("input", plan.value()->input_grad(0)->clone());
  return out;
}

TEST_F(Precision, Bf16TrainingGradientsOfConvGemmAndMatMul) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  Graph g;
  g.source = "conv-gemm-matmul";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {4, 3, 8, 8}, {}, true});
  g.initializers["cw"] = random_tensor({8, 3, 3, 3}, 2, -0.5f, 0.5f);
  g.initializers["cb"] = random_tensor({8}, 3, -0.5f, 0.5f);
  g.initializers["gw"] = random_tensor({16, 512}, 4, -0.1f, 0.1f);
  g.initializers["gb"] = random_tensor({16}, 5, -0.5f, 0.5f);
  g.initializers["m"] = random_tensor({16, 10}, 6, -0.5f, 0.5f);
  add_node(g, make_node("Conv", {{"pads", Attribute::of_ints({1, 1, 1, 1})}}), {"x", "cw", "cb"}, {"c"}, "conv");
  add_node(g, make_node("Flatten"), {"c"}, {"f"}, "flatten");
  add_node(g, make_node("Gemm", {{"transB", Attribute::of_int(1)}}), {"f", "gw", "gb"}, {"h"}, "fc");
  add_node(g, make_node("MatMul"), {"h", "m"}, {"z"}, "mm");
  g.initializers["g2"] = random_tensor({10, 6}, 8, -0.5f, 0.5f);  // a Gemm whose B is not transposed
  add_node(g, make_node("Gemm"), {"z", "g2"}, {"y"}, "fc2");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  const Tensor x = random_tensor({4, 3, 8, 8}, 1, -1.f, 1.f), seed = random_tensor({4, 6}, 7, -1.f, 1.f);
  const auto ref = bf16_gradients(g, "naive", mosaic::Precision::kF32, x, seed);
  const auto f32 = bf16_gradients(g, "onednn", mosaic::Precision::kF32, x, seed);
  const auto bf16 = bf16_gradients(g, "onednn", mosaic::Precision::kBF16, x, seed);
  ASSERT_EQ(ref.size(), 7u);
  ASSERT_EQ(bf16.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double scale = max_abs(ref[i].second);
    const Agreement a32 = compare_tensors(f32[i].second, ref[i].second, 0, 1e9);
    const Agreement a16 = compare_tensors(bf16[i].second, ref[i].second, 0, 1e9);
    EXPECT_LT(a32.max_abs, 1e-5 * scale) << ref[i].first;
    EXPECT_GT(a16.max_abs, 1e-4 * scale) << ref[i].first << ": the bf16 backward computed in float32";
    EXPECT_LT(a16.max_abs, 2e-2 * scale) << ref[i].first;
  }
}


/// bench's bf16 training check on real gradients (fmnist-cnn, whose MaxPools flip under bf16
/// rounding): the bf16 gradients pass, planted errors of the kinds a broken backward makes
/// do not.
TEST_F(Precision, Bf16GradientCheckPassesRoundingAndCatchesPlantedErrors) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  auto g = api::load_trainable("zoo:fmnist-cnn", 16);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const Tensor x = random_tensor({16, 1, 28, 28}, 1, 0.f, 1.f), seed = random_tensor({16, 10}, 2, -1.f, 1.f);
  const auto ref = bf16_gradients(g.value(), "naive", mosaic::Precision::kF32, x, seed);
  const auto bf16 = bf16_gradients(g.value(), "onednn", mosaic::Precision::kBF16, x, seed);
  ASSERT_EQ(ref.size(), bf16.size());
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double rel = relative_l2(bf16[i].second, ref[i].second);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, api::kBf16GradientTolerance) << ref[i].first;
    // Planted: half the gradient, its sign flipped, its elements reversed (a wrong transpose
    // or layout), and the gradient zeroed (a missing term).
    Tensor half = bf16[i].second.clone(), flipped = bf16[i].second.clone(), reversed = bf16[i].second.clone(),
           zero = bf16[i].second.clone();
    const int64_t n = half.numel();
    for (int64_t e = 0; e < n; ++e) {
      half.f32()[e] *= 0.5f;
      flipped.f32()[e] = -flipped.f32()[e];
      reversed.f32()[e] = bf16[i].second.f32()[n - 1 - e];
      zero.f32()[e] = 0;
    }
    EXPECT_GT(relative_l2(half, ref[i].second), api::kBf16GradientTolerance) << ref[i].first;
    EXPECT_GT(relative_l2(flipped, ref[i].second), api::kBf16GradientTolerance) << ref[i].first;
    if (n > 1) {
      EXPECT_GT(relative_l2(reversed, ref[i].second), api::kBf16GradientTolerance) << ref[i].first;
    }
    EXPECT_GT(relative_l2(zero, ref[i].second), api::kBf16GradientTolerance) << ref[i].first;
  }
  EXPECT_GT(worst, 1e-3) << "the bf16 training plan computed in float32";
}

/// `bench --mode training --precision both`: the float32 configuration matches naive, its bf16
/// twin agrees within the bf16 limits, and both are in the JSON with their precision.
TEST_F(Precision, BenchTrainingBothChecksBf16Gradients) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  const std::string out = path("bench.json");
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backends onednn --precision both --mode training --batch 16 --iterations 3 "
                       "--warmup 1 --no-db --no-peaks --json " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("check:   bf16 agrees with naive's float32 loss and gradients"), std::string::npos) << r.out;
  const json j = read_json(out);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][1]["label"], "onednn-bf16");
  EXPECT_EQ(j["runs"][1]["precision"], "bf16");
  EXPECT_TRUE(j["runs"][1]["check"]["passed"].get<bool>());
  EXPECT_GT(j["runs"][1]["check"]["max_rel_error"].get<double>(), 1e-3);
}

/// `train --precision bf16` on Fashion-MNIST: float32 master weights train as float32 does
/// (the same seed's loss curve), and the trained model's bf16 and float32 inferences agree on
/// at least 99% of the 10,000 test images.
TEST_F(Precision, TrainBf16FollowsFloat32AndAgreesOnTheTestSet) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist")) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const std::string base = path("train_");
  auto run = [&](const std::string& precision) {
    // One thread: 600 small steps of two spinning OpenMP threads took 91-108 s of the suite
    // beside another test (5 s alone); the numerics do not depend on it.
    CmdResult r = mosaic("train zoo:fmnist-cnn --data fashion-mnist --backend onednn --batch 32 --steps 300 --lr 0.02 "
                         "--threads 1 --precision " + precision + " --no-db --json " + base + precision + ".json");
    EXPECT_EQ(r.code, 0) << r.out;
    const json j = read_json(base + precision + ".json");
    return std::make_pair(r.out, j);
  };
  const auto [out16, j16] = run("bf16");
  const auto [out32, j32] = run("f32");
  EXPECT_EQ(j16["precision"], "bf16");
  EXPECT_EQ(j32["precision"], "f32");
  EXPECT_FALSE(j32.contains("bf16"));
  ASSERT_TRUE(j16.contains("bf16")) << out16;
  const json& b = j16["bf16"];
  EXPECT_EQ(b["rows"], 10000);
  EXPECT_GE(b["top1_agreement"].get<double>(), 0.99);
  EXPECT_LT(b["top1_agreement"].get<double>(), 1.0 + 1e-12);
  EXPECT_NEAR(b["test_accuracy_bf16"].get<double>(), b["test_accuracy_f32"].get<double>(), 0.01);
  EXPECT_NE(out16.find("top-1 agreement"), std::string::npos) << out16;
  // The loss curves: the mean of the last 100 steps within 5% of each other, both well
  // below chance (ln 10 = 2.30).
  auto tail_mean = [](const json& j) {
    double sum = 0;
    const auto& steps = j["steps"];
    for (size_t i = steps.size() - 100; i < steps.size(); ++i) sum += steps[i]["loss"].get<double>();
    return sum / 100;
  };
  ASSERT_EQ(j16["steps"].size(), 300u);
  ASSERT_EQ(j32["steps"].size(), 300u);
  const double l16 = tail_mean(j16), l32 = tail_mean(j32);
  EXPECT_LT(l32, 1.5);
  EXPECT_NEAR(l16, l32, 0.05 * l32);
  EXPECT_NE(j16["steps"][299]["loss"], j32["steps"][299]["loss"]) << "the bf16 run computed in float32";
}

}  // namespace
}  // namespace mosaic::test
