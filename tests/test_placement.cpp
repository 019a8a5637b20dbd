// Placement by node-name globs and from YAML placement files (--assign FILE.yaml).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "frontends/config/placement_config.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

Node named(const std::string& op, const std::string& name) {
  Node n = make_node(op);
  n.name = name;
  return n;
}

TEST(PlacementGlobs, NamesThenFirstMatchingGlobThenOpThenDefault) {
  auto p = Placement::parse("@/features/*=naive,@/features/features.0/*=onednn,@fc1=onednn,Gemm=im2col,*=im2col",
                            builtin_registry());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  // The first glob in spec order wins, even where a later one is more specific.
  EXPECT_EQ(p->backend_for(named("Conv", "/features/features.0/Conv")), "naive");
  EXPECT_EQ(p->backend_for(named("Relu", "/features/features.1/Relu")), "naive");
  EXPECT_EQ(p->backend_for(named("Gemm", "fc1")), "onednn");      // an exact name beats everything
  EXPECT_EQ(p->backend_for(named("Gemm", "fc2")), "im2col");      // then the op type
  EXPECT_EQ(p->backend_for(named("Relu", "/classifier/Relu")), "im2col");
  // A fused node follows its parts.
  EXPECT_EQ(p->backend_for(named("Conv", "conv9+/features/features.3/Relu")), "naive");
  EXPECT_NE(p->str().find("@/features/*=naive"), std::string::npos) << p->str();

  Graph g;
  g.source = "g.onnx";
  g.nodes = {named("Conv", "/features/features.0/Conv"), named("Gemm", "fc1")};
  EXPECT_TRUE(p->check_names(g).is_ok());
  auto typo = Placement::parse("@/feature/*=naive", builtin_registry());
  ASSERT_TRUE(typo.ok());
  const Status st = typo->check_names(g);
  EXPECT_NE(st.message().find("has no node matching '/feature/*'"), std::string::npos) << st.message();
}

class PlacementFile : public ScratchDirTest {
 protected:
  PlacementFile() : ScratchDirTest("mosaic_placement_") {}
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(path(name)) << text;
    return path(name);
  }
};

TEST_F(PlacementFile, ReadsDefaultOpsNodeGlobsAndFallback) {
  const std::string f = write("p.yaml",
                              "default: onednn\n"
                              "ops:\n  Gemm: im2col\n"
                              "nodes:\n  \"conv2*\": naive\n  fc2: naive\n"
                              "fallback: [im2col, naive]\n");
  bool has_fallback = false;
  auto p = load_placement_file(f, builtin_registry(), &has_fallback);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(has_fallback);
  EXPECT_EQ(p->fallback, (std::vector<std::string>{"im2col", "naive"}));
  EXPECT_EQ(p->backend_for(named("Conv", "conv2+relu2")), "naive");
  EXPECT_EQ(p->backend_for(named("Gemm", "fc1")), "im2col");
  EXPECT_EQ(p->backend_for(named("Gemm", "fc2")), "naive");
  EXPECT_EQ(p->backend_for(named("MaxPool", "pool1")), "onednn");
  EXPECT_TRUE(is_placement_file(f));
  EXPECT_FALSE(is_placement_file("Conv=onednn"));

  // The CLI plans with it, the file's fallback list in place of --fallback.
  const CmdResult r = mosaic("plan zoo:fmnist-cnn --assign " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("conv2+relu2          Conv               naive      naive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fallback im2col,naive"), std::string::npos) << r.out;
}

TEST_F(PlacementFile, MistakesNameTheFileAndTheKey) {
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"default: onednn\nopz:\n  Gemm: im2col\n", "unknown key 'opz'"},
      {"default: cuda\n", "'default': unknown backend 'cuda'"},
      {"ops:\n  Frobnicate: naive\n", "'ops' entry 'Frobnicate': unknown op type 'Frobnicate'"},
      {"nodes: [a, b]\n", "'nodes' must be a mapping"},
      {"fallback: [naive]\n", "assigns nothing"},
      {"default: [naive]\n", "'default' must be one backend name"},
      {"fallback: {a: b}\ndefault: naive\n", "'fallback' must be a backend name or a list"},
      {"default: onednn\n  bad indent: [\n", "not valid YAML"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string f = write("bad" + std::to_string(i) + ".yaml", cases[i].text);
    bool has_fallback = false;
    auto p = load_placement_file(f, builtin_registry(), &has_fallback);
    ASSERT_FALSE(p.ok()) << cases[i].text;
    EXPECT_NE(p.status().message().find(f), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find(cases[i].message), std::string::npos) << p.status().message();
  }
  const CmdResult r = mosaic("bench zoo:fmnist-cnn --assign " + path("missing.yaml"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("missing.yaml: no such placement file"), std::string::npos) << r.out;
}

TEST(MixedPlacement, GradcheckChecksTheBackwardOfEveryNodeWherePlaced) {
  // Conv on onednn, Gemm on im2col, the rest on naive: every tensor against finite
  // differences, and no node counts as not checked (none fell back).
  CmdResult r = mosaic("gradcheck zoo:fmnist-cnn --batch 1 --assign Conv=onednn,Gemm=im2col,*=naive");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("on placement Conv=onednn,Gemm=im2col,*=naive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("9 passed, 0 failed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not checked"), std::string::npos) << r.out;
  // A planted bug belongs to one backend: --plant with --assign is refused.
  r = mosaic("gradcheck zoo:fmnist-cnn --assign Conv=onednn --plant conv-dw-scale");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("excludes --assign"), std::string::npos) << r.out;
  r = mosaic("gradcheck zoo:fmnist-cnn --assign Conv=onednn --backend im2col");
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST(MixedPlacement, TrainingFollowsTheNaiveOracleStepForStep) {
  // The same seeded batches and initial weights: Conv on onednn, Gemm on im2col and the rest
  // on naive give naive's per-step losses to float rounding.
  const std::string dir = std::filesystem::temp_directory_path().string() + "/mosaic_mixed_train_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string common = "train zoo:fmnist-cnn --data synthetic:64,1,28,28,10 --batch 16 --epochs 1 --no-eval ";
  CmdResult r = mosaic(common + "--backend naive --json " + dir + "/naive.json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic(common + "--assign Conv=onednn,Gemm=im2col,*=naive --json " + dir + "/mixed.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("with placement Conv=onednn,Gemm=im2col,*=naive"), std::string::npos) << r.out;
  const auto naive = read_json(dir + "/naive.json"), mixed = read_json(dir + "/mixed.json");
  EXPECT_EQ(mixed["assign"], "Conv=onednn,Gemm=im2col,*=naive");
  ASSERT_EQ(naive["steps"].size(), 3u);
  ASSERT_EQ(mixed["steps"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const double a = naive["steps"][i]["loss"], b = mixed["steps"][i]["loss"];
    EXPECT_NEAR(b, a, 1e-5 * a) << "step " << i + 1;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mosaic::test
