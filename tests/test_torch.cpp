// The torch backend (PyTorch's ATen via libtorch), built where libtorch-dev is installed.
// The test process loads it before the parameterised suites are instantiated, so every
// suite that takes its backends from the registry (BackendOps, OptimisedBackward,
// WholeNetwork, GradcheckBackends with every planted bug) runs each case on torch too.
// Here: how the CLI finds and loads it, and whole models on it against the naive oracle.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <thread>

#include <omp.h>

#include "backends/plugins.hpp"
#include "backends/registry.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

const std::string kTorchPlugin = MOSAIC_TORCH_PLUGIN;

// Before main: gtest evaluates the suites' backend lists in InitGoogleTest. Loading libtorch
// takes about a second, so only processes whose tests use it do (test_util.hpp).
const Status kLoaded = process_tests_backend("torch") ? load_plugin(kTorchPlugin) : Status::ok();

std::vector<std::string> wanted(std::vector<const char*> argv) {
  return bundled_plugins_wanted(static_cast<int>(argv.size()), argv.data());
}

/// A Conv node's kernel context: input, weights (no bias), output.
KernelContext conv_context(const Node& conv, const Shape& x, const Shape& w, const Shape& y) {
  KernelContext ctx;
  ctx.node = &conv;
  ctx.inputs = {TensorDesc(DType::kF32, x), TensorDesc(DType::kF32, w)};
  ctx.input_present = {true, true};
  ctx.outputs = {TensorDesc(DType::kF32, y)};
  ctx.output_present = {true};
  ctx.constants = {nullptr, nullptr};
  return ctx;
}

class TorchBackend : public ScratchDirTest {
 protected:
  TorchBackend() : ScratchDirTest("mosaic_torch_") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    ASSERT_TRUE(kLoaded.is_ok()) << kLoaded.to_string();
    if (!builtin_registry().has_backend("torch"))
      GTEST_SKIP() << "the torch backend is loaded into test processes whose --gtest_filter names torch (ctest's do)";
  }
};

TEST_F(TorchBackend, IsBundledAndLoadedOnlyWhereACommandNamesIt) {
  std::vector<std::string> bundled;  // the torch plugin (the cuda one is bundled too where it is built)
  for (const std::string& p : bundled_plugins())
    if (bundled_backend_name(p) == "torch") bundled.push_back(p);
  ASSERT_EQ(bundled.size(), 1u);

  EXPECT_TRUE(wanted({"mosaic", "bench", "zoo:fmnist-cnn"}).empty());
  EXPECT_TRUE(wanted({"mosaic", "bench", "zoo:fmnist-cnn", "--backends", "naive,onednn"}).empty());
  EXPECT_TRUE(wanted({"mosaic", "info", "torch_models/a.onnx"}).empty()) << "a word containing the name is not it";
  EXPECT_EQ(wanted({"mosaic", "bench", "m.onnx", "--backends", "onednn,torch"}), bundled);
  EXPECT_EQ(wanted({"mosaic", "bench", "m.onnx", "--assign=Conv=torch,*=naive"}), bundled);
  EXPECT_EQ(wanted({"mosaic", "verify", "dir", "--backend", "all"}), bundled_plugins());
  EXPECT_EQ(wanted({"mosaic", "backends"}), bundled_plugins());
  std::ofstream(path("placement.yaml")) << "default: onednn\nops:\n  Conv: torch\n";
  const std::string yaml = path("placement.yaml");
  EXPECT_EQ(wanted({"mosaic", "plan", "m.onnx", "--assign", yaml.c_str()}), bundled);

  // The CLI loads it by itself, records it in the provenance, and lists it.
  CmdResult r = mosaic("backends --names");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("torch\n"), std::string::npos) << r.out;
  r = mosaic("info zoo:fmnist-cnn --no-nodes");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("PyTorch"), std::string::npos) << "info does not name torch: it must not load it";
}

TEST_F(TorchBackend, LeavesTheThreadCountToMosaic) {
  // ATen's first parallel call on a thread sets OpenMP's count for that thread to ATen's own
  // default (1 on this VM): every backend would then run on it. In a fresh thread (ATen's
  // initialisation is per thread), with a count ATen would not choose by itself, the count
  // survives both the version query that every report makes and a torch kernel's run.
  const int before = omp_get_max_threads();
  int after_details = 0, after_forward = 0;
  std::string details;
  Status st = Status::ok();
  std::thread([&] {
    ASSERT_TRUE(set_num_threads(3).is_ok());
    for (const auto& [k, v] : builtin_registry().info("torch")->properties().libraries) details += k + ": " + v + "\n";
    after_details = omp_get_max_threads();
    Node conv = make_node("Conv");
    const KernelContext ctx = conv_context(conv, {2, 3, 9, 9}, {4, 3, 3, 3}, {2, 4, 7, 7});
    auto kernel = builtin_registry().create("torch", ctx);
    if (!kernel.ok()) {
      st = kernel.status();
      return;
    }
    Tensor x = random_tensor({2, 3, 9, 9}, 1), w = random_tensor({4, 3, 3, 3}, 2);
    Tensor y = Tensor::empty(TensorDesc(DType::kF32, {2, 4, 7, 7}));
    st = (*kernel)->forward({&x, &w}, {&y});
    after_forward = omp_get_max_threads();
  }).join();
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(after_details, 3) << details;
  EXPECT_EQ(after_forward, 3);
  EXPECT_NE(details.find(", 3 threads"), std::string::npos) << details;
  ASSERT_TRUE(set_num_threads(before).is_ok());
  builtin_registry().info("torch")->properties();  // ATen's count back to this thread's
}

TEST_F(TorchBackend, AnATenErrorIsAnErrorNamingTheNodeNotAFallback) {
  // A Conv kernel built for 3 input channels, then handed weights for 2: ATen throws, and
  // the kernel returns an internal error (exit code 2 in the CLI) that names the node.
  Node conv = make_node("Conv");
  conv.name = "conv9";
  const KernelContext ctx = conv_context(conv, {1, 3, 5, 5}, {4, 3, 3, 3}, {1, 4, 3, 3});
  auto kernel = builtin_registry().create("torch", ctx);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  Tensor x = random_tensor({1, 3, 5, 5}, 1), w = random_tensor({4, 2, 3, 3}, 2);
  Tensor y = Tensor::empty(TensorDesc(DType::kF32, {1, 4, 3, 3}));
  const Status st = (*kernel)->forward({&x, &w}, {&y});
  EXPECT_EQ(st.code(), StatusCode::kInternal) << st.to_string();
  EXPECT_NE(st.message().find("node 'conv9' (Conv): torch forward: "), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << "one line, without ATen's backtrace";

  // A configuration ATen cannot express is a decline with the reason (the planner falls back).
  Node pool = make_node("AveragePool", {{"kernel_shape", Attribute::of_ints({2, 2})}, {"pads", Attribute::of_ints({0, 0, 1, 1})}});
  KernelContext pctx;
  pctx.node = &pool;
  pctx.inputs = {TensorDesc(DType::kF32, {1, 1, 4, 4})};
  pctx.input_present = {true};
  pctx.outputs = {TensorDesc(DType::kF32, {1, 1, 4, 4})};
  pctx.output_present = {true};
  pctx.constants = {nullptr};
  auto declined = builtin_registry().create("torch", pctx);
  ASSERT_FALSE(declined.ok());
  EXPECT_EQ(declined.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(declined.status().message().find("excludes the padding"), std::string::npos) << declined.status().message();
}

TEST_F(TorchBackend, RunsWholeModelsAsTheOracleDoesAloneAndMixed) {
  // Inference: every node of fmnist-cnn on torch (the fused Conv+Relu and Gemm+Relu too),
  // outputs checked against naive; the provenance names PyTorch's version.
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backends torch --batch 4 --no-peaks --iterations 2 --warmup 1 "
                       "--repeats 1 --json " + path("b.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(path("b.json"));
  const auto doc = nlohmann::json::parse(f);
  const auto& run = doc["runs"][0];
  EXPECT_TRUE(run["check"]["passed"].get<bool>()) << run["check"].dump();
  for (const auto& n : run["nodes"]) EXPECT_EQ(n["backend"], "torch") << n.dump();
  EXPECT_NE(doc["provenance"].dump().find("PyTorch"), std::string::npos);
  EXPECT_NE(doc["provenance"].dump().find("libmosaic_torch.so"), std::string::npos);

  // Mixed with the built-ins by op type, with a plan that names where each node runs.
  r = mosaic("plan zoo:fmnist-cnn --assign Conv=torch,Gemm=onednn,*=im2col --batch 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("torch"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --assign Conv=torch,Gemm=onednn,*=im2col --batch 2 --no-peaks --iterations 1 "
             "--warmup 0 --repeats 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("outputs match naive"), std::string::npos) << r.out;
}

TEST_F(TorchBackend, TrainsAlexnetAsTheOracleDoes) {
  // Training: loss and every gradient against naive, on a model with padding, dropout
  // (which runs where Mosaic's generator is) and max pooling. About 20 s: --full only.
  CmdResult r = mosaic("bench zoo:alexnet-cifar --backends torch --mode training --batch 2 --no-peaks --iterations 1 "
                       "--warmup 0 --repeats 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("loss and gradients match naive"), std::string::npos) << r.out;
}

TEST_F(TorchBackend, AnInstalledMosaicFindsItsBundledTorchBackend) {
  // cmake --install puts the CLI in bin/ and the plugin in lib/mosaic/plugins/, where the
  // installed CLI looks (the build tree's plugins/ does not exist there).
  CmdResult r = mosaic_shell("cmake --install " + std::string(MOSAIC_PLUGIN_DIR) + " --prefix " + path("prefix"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string installed = path("prefix") + "/bin/mosaic";
  r = mosaic_shell(installed + " backends --names");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("torch\n"), std::string::npos) << r.out;
  r = mosaic_shell(installed + " bench zoo:fmnist-cnn --backends torch --batch 2 --no-peaks --iterations 1 --warmup 0 "
                   "--repeats 1 --no-db");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lib/mosaic/plugins/libmosaic_torch.so"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("outputs match naive"), std::string::npos) << r.out;
}

TEST_F(TorchBackend, TrainsLikeTheOracleStepForStep) {
  // SGD on fmnist-cnn for 3 steps: torch's per-step losses are naive's to float rounding.
  auto losses = [&](const std::string& backend) {
    const CmdResult r = mosaic("train zoo:fmnist-cnn --data synthetic:64,1,28,28,10 --backend " + backend +
                               " --steps 3 --batch 8 --no-eval --no-shuffle --threads 1 --json " + path(backend + ".json"));
    EXPECT_EQ(r.code, 0) << r.out;
    std::vector<double> v;
    std::ifstream in(path(backend + ".json"));
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("steps"))
      for (const auto& s : j["steps"]) v.push_back(s["loss"].get<double>());
    return v;
  };
  const std::vector<double> naive = losses("naive"), torch = losses("torch");
  ASSERT_EQ(naive.size(), 3u);
  ASSERT_EQ(torch.size(), naive.size());
  for (size_t i = 0; i < naive.size(); ++i) EXPECT_NEAR(torch[i], naive[i], 1e-4 * std::fabs(naive[i])) << "step " << i;
}

}  // namespace
}  // namespace mosaic::test
