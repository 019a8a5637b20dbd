// --precision bf16: onednn's convolutions and matrix products on bfloat16 inputs and weights,
// checked against the float32 oracle within kBf16Tolerance, side by side with float32; every
// other backend, training, and a CPU without bfloat16 dot products decline with the reason.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "api/bench.hpp"
#include "backends/registry.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "metrics/compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using nlohmann::json;

bool onednn_has_bf16() {
  const BackendInfo* info = builtin_registry().info("onednn");
  return info && precision_declined(*info, Precision::kBF16).empty();
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

TEST(Precision, Bf16PlansRoundTheirInputsAndStayWithinTheTolerance) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  Graph g = gemm_matmul();
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  const Tensor x = random_tensor({4, 64}, 1, -1.f, 1.f);
  auto output = [&](const std::string& backend, Precision p) {
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
  const Tensor ref = output("naive", Precision::kF32), f32 = output("onednn", Precision::kF32),
               bf16 = output("onednn", Precision::kBF16);
  ASSERT_TRUE(ref.defined() && f32.defined() && bf16.defined());
  const double scale = max_abs(ref);
  const Agreement a32 = compare_tensors(f32, ref, 0, 1e9), a16 = compare_tensors(bf16, ref, 0, 1e9);
  // bfloat16 keeps 8 significant bits: the error is far above float32's, and far below the tolerance.
  EXPECT_LT(a32.max_abs, 1e-5 * scale);
  EXPECT_GT(a16.max_abs, 1e-4 * scale) << "the bf16 plan computed in float32";
  EXPECT_LT(a16.max_abs, api::kBf16Tolerance * scale);
  EXPECT_EQ(top1_agreement(ref, ref), 1.0);
}

TEST(Precision, BackendsTrainingAndCpusWithoutBf16Decline) {
  Graph g = gemm_matmul();
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  PlanOptions po;
  po.precision = Precision::kBF16;
  for (const std::string backend : {"naive", "im2col"}) {
    auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry(), po);
    ASSERT_FALSE(plan.ok()) << backend;
    EXPECT_NE(plan.status().message().find("backend " + backend + " declines --precision bf16: it computes in float32 only"),
              std::string::npos)
        << plan.status().message();
  }
  po.training = true;
  auto plan = Plan::build(g, Placement::all_on("onednn", {}), builtin_registry(), po);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("is for inference plans"), std::string::npos) << plan.status().message();
  EXPECT_FALSE(parse_precision("int4").ok());
  EXPECT_EQ(parse_precision("bfloat16").value(), Precision::kBF16);
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
  r = mosaic("bench zoo:fmnist-cnn --backends onednn --precision bf16 --mode training --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("training computes in float32"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --backends onednn --precision fp8 --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST(Precision, BenchBothTimesBf16BesideFloat32WithItsError) {
  if (!onednn_has_bf16()) GTEST_SKIP() << "this CPU has no bfloat16 dot products (AVX512_BF16 or AMX)";
  const std::string out = (std::filesystem::temp_directory_path() / ("mosaic_precision_" + std::to_string(::getpid()) + ".json")).string();
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

}  // namespace
}  // namespace mosaic::test
