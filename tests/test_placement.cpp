// Placement by node-name globs and from YAML placement files (--assign FILE.yaml).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <fstream>

#include "api/auto_placement.hpp"
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
      {"default: tpu\n", "'default': unknown backend 'tpu'"},
      {"ops:\n  Frobnicate: naive\n", "'ops' entry 'Frobnicate': unknown op type 'Frobnicate'"},
      {"nodes: [a, b]\n", "'nodes' must be a mapping"},
      {"fallback: [naive]\n", "assigns nothing"},
      {"default: [naive]\n", "'default' must be one backend name"},
      {"fallback: {a: b}\ndefault: naive\n", "'fallback' must be a backend name or a list"},
      {"default: onednn\n  bad indent: [\n", "not valid YAML"},
      // A repeated key would silently keep one of the two.
      {"default: onednn\ndefault: naive\n", "key 'default' appears twice (line 2)"},
      {"default: onednn\nops:\n  Conv: im2col\n  Conv: naive\n", "'ops': 'Conv' appears twice (line 4)"},
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

namespace mosaic::test {
namespace {

using api::PlacementProblem;
using api::solve_placement;

/// Two backends, three nodes in a chain; a conversion between different backends costs
/// `convert`. Node 1 is cheaper on backend 1, the others on backend 0.
PlacementProblem chain(double convert) {
  PlacementProblem p;
  p.node = {{1, 5}, {5, 1}, {1, 5}};
  for (size_t i = 0; i + 1 < 3; ++i) p.edges.push_back({i, i + 1, {{0, convert}, {convert, 0}}});
  return p;
}

TEST(AutoPlacement, OnAChainMovesANodeOnlyWhenItsGainPaysTheConversions) {
  // all on 0: 1 + 5 + 1 = 7; node 1 moved: 1 + 1 + 1 + 2 conversions.
  EXPECT_EQ(solve_placement(chain(3)), (std::vector<size_t>{0, 0, 0})) << "9 > 7: stays";
  EXPECT_EQ(solve_placement(chain(1)), (std::vector<size_t>{0, 1, 0})) << "5 < 7: moves";
  EXPECT_DOUBLE_EQ(chain(1).total({0, 1, 0}), 5);
  // A node a backend cannot run is never put there.
  PlacementProblem p = chain(0);
  p.node[1][1] = std::numeric_limits<double>::infinity();
  EXPECT_EQ(solve_placement(p)[1], 0u);
}

TEST(AutoPlacement, AnEdgeThatSkipsANodeIsChargedByTheRefinement) {
  // 0 -> 1 -> 2 and 0 -> 2 (a skip connection, which the chain DP does not see): the DP
  // alone would put node 2 on backend 1 (cost 0) and pay 5 on the skip edge.
  PlacementProblem p;
  p.node = {{0, 10}, {1, 0}, {1, 0}};
  p.edges = {{0, 1, {{0, 0}, {0, 0}}}, {1, 2, {{0, 0}, {0, 0}}}, {0, 2, {{0, 5}, {5, 0}}}};
  const std::vector<size_t> a = solve_placement(p);
  EXPECT_EQ(a, (std::vector<size_t>{0, 1, 0}));
  EXPECT_DOUBLE_EQ(p.total(a), 1);
}

class AutoPlacementCli : public ScratchDirTest {
 protected:
  AutoPlacementCli() : ScratchDirTest("mosaic_auto_") {}
};

TEST_F(AutoPlacementCli, BenchMeasuresChecksCachesAndReportsTheChoice) {
  const std::string env = "MOSAIC_CACHE_DIR=" + path("cache") + " ";
  const std::string cmd = env + MOSAIC_BIN + " bench zoo:fmnist-cnn --assign auto --batch 4 --no-peaks --iterations 3 "
                          "--warmup 1 --repeats 1 --no-db --auto-budget 20 --json " + path("auto.json");
  CmdResult r = mosaic_shell(cmd);
  ASSERT_EQ(r.code, 0) << r.out;
  // It says what it measures, within a stated budget, before minutes pass in silence.
  EXPECT_NE(r.out.find("candidates alone ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("at most about 20 s (--auto-budget)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("auto placement: measuring onednn alone (at most "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("auto placement: checking the choice against every candidate alone, 3 alternating rounds"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("auto placement (measured every candidate alone): predicted "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("auto placement measured: "), std::string::npos) << r.out;
  // Every candidate alone and the auto plan, each checked against naive.
  const auto doc = read_json(path("auto.json"));
  std::vector<std::string> labels;
  for (const auto& run : doc["runs"]) {
    labels.push_back(run["label"]);
    EXPECT_TRUE(run["check"]["passed"].get<bool>()) << run["label"];
  }
  std::vector<std::string> expected = optimised_backends();
  for (const std::string& name : bundled_available_backends())  // `auto` loads the bundled backends too
    if (std::find(expected.begin(), expected.end(), name) == expected.end()) expected.push_back(name);
  std::sort(labels.begin(), labels.end());
  expected.push_back("auto");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(labels, expected);
  EXPECT_TRUE(std::filesystem::exists(path("cache") + "/auto_placement.json"));
  // A second run takes the choice from the cache; --remeasure measures again.
  r = mosaic_shell(cmd);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("auto placement (from the cache; --remeasure measures again)"), std::string::npos) << r.out;
  r = mosaic_shell(cmd + " --remeasure");
  EXPECT_NE(r.out.find("auto placement (measured every candidate alone)"), std::string::npos) << r.out;
  // The verdict: auto against the fastest single backend in alternating rounds.
  const auto& ap = doc["auto_placement"];
  EXPECT_EQ(ap["mode"], "inference");
  EXPECT_EQ(ap["side_by_side_rounds"], 5);
  EXPECT_LE(ap["side_by_side_ratio_min"].get<double>(), ap["side_by_side_ratio"].get<double>());
  EXPECT_LE(ap["side_by_side_ratio"].get<double>(), ap["side_by_side_ratio_max"].get<double>());
  EXPECT_GT(ap["side_by_side_ratio_min"].get<double>(), 0);
  EXPECT_NE(r.out.find("auto placement, side by side in 5 alternating rounds: "), std::string::npos) << r.out;
  // The choice's check timed every candidate in alternating rounds, and best_single is the
  // fastest of them there (not the one-after-another measurement's).
  const auto& singles = ap["check"]["singles_ms"];
  ASSERT_EQ(singles.size() + 1, expected.size()) << ap.dump();
  std::string fastest;
  for (const auto& [backend, ms] : singles.items()) {
    EXPECT_GT(ms.get<double>(), 0) << backend;
    if (fastest.empty() || ms.get<double>() < singles[fastest].get<double>()) fastest = backend;
  }
  EXPECT_EQ(ap["best_single"], fastest) << ap.dump();
  EXPECT_DOUBLE_EQ(ap["check"]["single_ms"].get<double>(), singles[fastest].get<double>());
  EXPECT_NE(r.out.find("auto placement check, alternating rounds, each candidate alone: "), std::string::npos) << r.out;

  // Training: each node's forward and backward measured; every plan's loss and gradients
  // checked against naive; its own cache entry (the inference choice is not reused).
  const std::string train = env + MOSAIC_BIN + " bench zoo:fmnist-cnn --mode training --assign auto --batch 4 --no-peaks "
                            "--iterations 3 --warmup 1 --repeats 1 --no-db --json " + path("train.json");
  r = mosaic_shell(train);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("auto placement (measured every candidate alone): predicted "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ms per training step"), std::string::npos) << r.out;
  const auto tdoc = read_json(path("train.json"));
  EXPECT_EQ(tdoc["auto_placement"]["mode"], "training");
  EXPECT_TRUE(tdoc["auto_placement"].contains("side_by_side_ratio")) << tdoc["auto_placement"].dump();
  labels.clear();
  for (const auto& run : tdoc["runs"]) {
    labels.push_back(run["label"]);
    EXPECT_TRUE(run["check"]["passed"].get<bool>()) << run["label"];
  }
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, expected);
  r = mosaic_shell(train);
  EXPECT_NE(r.out.find("auto placement (from the cache; --remeasure measures again)"), std::string::npos) << r.out;

  // What cannot be measured in this one process is refused before any work.
  for (const std::string flags : {"--processes 2", "--find-max-batch"}) {
    r = mosaic("bench zoo:fmnist-cnn --assign auto --no-db " + flags);
    EXPECT_EQ(r.code, 2) << flags << ": " << r.out;
    EXPECT_NE(r.out.find("--assign auto measures and times in this one process"), std::string::npos) << r.out;
  }
}

}  // namespace
}  // namespace mosaic::test
