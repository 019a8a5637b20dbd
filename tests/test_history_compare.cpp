// The results store (bench/train/sweep --db), `mosaic history` and `mosaic compare`:
// the Mann-Whitney test against hand-computed values, compare's verdicts on runs with a
// known change, and every bad-input path.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "metrics/results_db.hpp"
#include "metrics/run_compare.hpp"
#include "metrics/stats.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(Stats, MannWhitneyMatchesTheTextbookNormalApproximation) {
  // p = erfc(z / sqrt 2), z = (|U - n_a n_b / 2| - 1/2) / sigma with the tie-corrected sigma
  // (R's wilcox.test(exact = FALSE, correct = TRUE)); values computed by hand in Python.
  std::vector<double> lo, hi;
  for (int i = 1; i <= 8; ++i) lo.push_back(i), hi.push_back(i + 8);
  EXPECT_NEAR(mann_whitney_p(lo, hi), 0.0009391056991171905, 1e-12);  // U = 0
  EXPECT_NEAR(mann_whitney_p(hi, lo), 0.0009391056991171905, 1e-12);  // symmetric
  EXPECT_NEAR(mann_whitney_p({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), 0.49482822787670633, 1e-12);
  EXPECT_NEAR(mann_whitney_p({1, 1, 2, 2, 3, 3, 4, 4}, {2, 2, 3, 3, 4, 4, 5, 5}), 0.14639909928296396, 1e-12);  // ties
  EXPECT_EQ(mann_whitney_p({3, 3, 3}, {3, 3}), 1.0);  // every value equal: no evidence
  EXPECT_TRUE(std::isnan(mann_whitney_p({}, {1, 2})));
}

TEST(Stats, StudentAndWelchMatchTablesAndNumericIntegration) {
  // Textbook critical values (two-sided 5%), the Cauchy case, and a Welch test whose p was
  // integrated numerically from the t density in Python.
  EXPECT_NEAR(student_t_p(2.228139, 10), 0.05, 1e-6);
  EXPECT_NEAR(student_t_p(-2.776445, 4), 0.05, 1e-6);
  EXPECT_NEAR(student_t_p(1, 1), 0.5, 1e-12);
  EXPECT_NEAR(student_t_p(0, 7), 1.0, 1e-12);
  EXPECT_NEAR(welch_t_p({1, 2, 3, 4}, {3, 4, 5, 6, 7}), 0.03493878235999018, 1e-9);
  EXPECT_EQ(welch_t_p({2, 2, 2}, {2, 2}), 1.0);
  EXPECT_EQ(welch_t_p({2, 2, 2}, {3, 3}), 0.0);
  EXPECT_TRUE(std::isnan(welch_t_p({1}, {1, 2, 3})));
}

TEST(Compare, ProcessMediansAreComparedByTheirSpread) {
  // Five processes each; B's are 10% slower. Tight processes: SLOWER. Processes that spread
  // +-15% (the between-process noise of a busy machine): no detectable difference.
  const std::vector<double> tight{10.0, 10.1, 9.9, 10.05, 9.95}, loose{10.0, 11.5, 8.5, 10.8, 9.2};
  std::vector<double> tight_b, loose_b;
  for (double v : tight) tight_b.push_back(v * 1.1);
  for (double v : loose) loose_b.push_back(v * 1.1);
  auto t = compare_process_medians("x", tight, tight_b, 0.05, 0.05);
  EXPECT_EQ(t.verdict, Change::kSlower);
  EXPECT_NEAR(t.change, 0.1, 1e-12);  // ratio of geometric means
  EXPECT_TRUE(t.by_process);
  EXPECT_EQ(compare_process_medians("x", loose, loose_b, 0.05, 0.05).verdict, Change::kNone);
  EXPECT_EQ(compare_process_medians("x", {10, 10}, {20, 20, 20}, 0.05, 0.05).verdict, Change::kTooFewSamples);
}

std::vector<double> spread(double median, int n, double rel = 0.02) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(median * (1 + rel * (static_cast<double>(i) / (n - 1) - 0.5)));
  return v;
}

TEST(Compare, VerdictsFollowSignificanceThenThreshold) {
  auto t = compare_samples("x", spread(10, 40), spread(12, 40), 0.05, 0.05);
  EXPECT_EQ(t.verdict, Change::kSlower);
  EXPECT_NEAR(t.change, 0.2, 1e-12);
  EXPECT_EQ(compare_samples("x", spread(10, 40), spread(8, 40), 0.05, 0.05).verdict, Change::kFaster);
  // Significant (the samples do not overlap) but a 3% move is under a 5% threshold.
  EXPECT_EQ(compare_samples("x", spread(10, 40, 0.01), spread(10.3, 40, 0.01), 0.05, 0.05).verdict, Change::kWithinThreshold);
  EXPECT_EQ(compare_samples("x", spread(10, 40), spread(10, 40), 0.05, 0.05).verdict, Change::kNone);
  // A large move that the samples cannot support: the spread swamps it.
  EXPECT_EQ(compare_samples("x", {1, 9, 1, 9, 1, 9, 1, 9, 1, 9}, {9, 1, 9, 1, 9, 1, 9, 1, 9, 2}, 0.05, 0.05).verdict,
            Change::kNone);
  t = compare_samples("x", spread(10, 7), spread(20, 40), 0.05, 0.05);
  EXPECT_EQ(t.verdict, Change::kTooFewSamples);
  EXPECT_TRUE(std::isnan(t.p_value));
}

class History : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mosaic_history_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = (dir_ / "runs.sqlite").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  /// A short real benchmark, recorded in the test's store.
  CmdResult bench(const std::string& extra = "") {
    return mosaic("bench zoo:fmnist-cnn --backends im2col,onednn --batch 4 --iterations 20 --warmup 2 --no-check --no-peaks --db " +
                  db_ + " " + extra);
  }
  fs::path dir_;
  std::string db_;
};

TEST_F(History, BenchTrainAndSweepRunsAreRecordedAndListed) {
  CmdResult r = bench("--json " + path("a.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("recorded as run 1 in " + db_), std::string::npos) << r.out;
  r = mosaic("train zoo:fmnist-cnn --data synthetic:32,1,28,28,10 --batch 8 --steps 2 --no-eval --backend im2col --db " + db_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("recorded as run 2"), std::string::npos) << r.out;
  std::ofstream(path("grid.yaml")) << "name: tiny\noutput: out\ndata: synthetic:16,1,28,28,10\nmodels: zoo:fmnist-cnn\n"
                                      "backends: [im2col]\nbatch: 8\nepochs: 1\nsteps_per_epoch: 1\n";
  r = mosaic("sweep " + path("grid.yaml") + " --db " + db_);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("recorded as run 3"), std::string::npos) << r.out;
  EXPECT_EQ(read_json(path("out/sweep.json"))["schema"], "mosaic.sweep/1");

  r = mosaic("history --db " + db_);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"bench  zoo:fmnist-cnn", "train  zoo:fmnist-cnn", "sweep", "im2col ", "1 cells: 1 done"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  r = mosaic("history --db " + db_ + " --kind train");
  EXPECT_EQ(r.out.find("bench  "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train  "), std::string::npos) << r.out;

  // The stored document is the one --json wrote (the recorded run is the reported run).
  r = mosaic("history --db " + db_ + " --show 1 > " + path("shown.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const json shown = read_json(path("shown.json")), written = read_json(path("a.json"));
  EXPECT_EQ(shown["runs"][0]["samples"], written["runs"][0]["samples"]);
  EXPECT_EQ(shown["provenance"]["run"]["time_utc"], written["provenance"]["run"]["time_utc"]);

  // The headline figures are queryable with plain SQL (docs/json-schema.md#results-store).
  auto db = ResultsDb::open(db_);
  ASSERT_TRUE(db.ok()) << db.status().message();
  auto runs = db->list({"", "", 0});
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 3u);
  EXPECT_EQ(runs->back().kind, "bench");
  EXPECT_EQ(runs->back().batch, 4);
  EXPECT_EQ(runs->front().kind, "sweep");
  r = mosaic_shell("sqlite3 " + db_ + " \"SELECT value FROM results WHERE run_id = 1 AND config = 'onednn' AND metric = 'median_ms'\"");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NEAR(std::stod(r.out), written["runs"][1]["iteration_ms"]["median"].get<double>(), 1e-9);
}

TEST_F(History, RecordingIsOffWithNoDbOrMosaicDbOff) {
  const std::string cwd_db = path("mosaic-runs.sqlite");
  CmdResult r = mosaic_shell("cd " + dir_.string() + " && " + MOSAIC_BIN + " bench zoo:fmnist-cnn --backends im2col --batch 2 --iterations 10 --no-check --no-peaks --no-db");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(cwd_db));
  r = mosaic_shell("cd " + dir_.string() + " && MOSAIC_DB=off " + MOSAIC_BIN + " bench zoo:fmnist-cnn --backends im2col --batch 2 --iterations 10 --no-check --no-peaks");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(cwd_db));
  // Unset: the default file in the working directory.
  r = mosaic_shell("cd " + dir_.string() + " && env -u MOSAIC_DB " + MOSAIC_BIN + " bench zoo:fmnist-cnn --backends im2col --batch 2 --iterations 10 --no-check --no-peaks");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(fs::exists(cwd_db)) << r.out;
  EXPECT_NE(r.out.find("recorded as run 1 in mosaic-runs.sqlite"), std::string::npos) << r.out;
}

TEST_F(History, BenchProcessesRecordsThePooledRunOnce) {
  CmdResult r = bench("--processes 2 --json " + path("pooled.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto db = ResultsDb::open(db_);
  ASSERT_TRUE(db.ok());
  auto runs = db->list({"", "", 0});
  ASSERT_EQ(runs->size(), 1u) << r.out;
  auto doc = db->document(runs->front().id);
  ASSERT_TRUE(doc.ok());
  EXPECT_EQ(doc.value()["runs"][0]["samples"]["iteration_ms"].size(), 40u);  // 2 processes x 20
}

/// `doc` with every iteration sample of configuration `label` (and its nodes) scaled.
json scaled(json doc, const std::string& label, double factor, const std::string& only_node = "") {
  for (auto& run : doc["runs"]) {
    if (run["label"] != label) continue;
    if (only_node.empty())
      for (auto& v : run["samples"]["iteration_ms"]) v = v.get<double>() * factor;
    for (auto& n : run["nodes"])
      if (only_node.empty() || n["name"] == only_node)
        for (auto& v : n["samples_us"]) v = v.get<double>() * factor;
  }
  return doc;
}

TEST_F(History, CompareFindsAKnownSlowdownAndNothingInTheSameRun) {
  CmdResult r = bench("--json " + path("a.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  // The known changes are applied to steady samples (a real run's spread on a loaded
  // machine can swamp even a 40% change; that the test then says so is checked above).
  json a = read_json(path("a.json"));
  for (auto& run : a["runs"]) {
    run["samples"]["iteration_ms"] = spread(2.0, 40);
    for (auto& n : run["nodes"])
      if (!n["view"].get<bool>()) n["samples_us"] = spread(100.0, 40);
  }
  std::ofstream(path("a.json")) << a.dump();
  std::ofstream(path("slow.json")) << scaled(a, "onednn", 1.3).dump();
  std::ofstream(path("fast.json")) << scaled(a, "im2col", 0.6).dump();
  std::ofstream(path("node.json")) << scaled(a, "im2col", 3.0, "conv1+relu1").dump();

  // A run against itself says nothing: refused, whether named twice or by two names.
  r = mosaic("compare 1 1 --db " + db_);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("A and B are the same run"), std::string::npos) << r.out;
  r = mosaic("compare " + path("a.json") + " " + path("a.json"));
  EXPECT_EQ(r.code, 2) << r.out;
  std::filesystem::copy_file(path("a.json"), path("a_copy.json"));
  r = mosaic("compare " + path("a.json") + " " + path("a_copy.json"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("A and B are the same run"), std::string::npos) << r.out;

  r = mosaic("compare " + path("a.json") + " " + path("slow.json") + " --json " + path("cmp.json"));
  EXPECT_EQ(r.code, 1) << r.out;  // gates CI
  EXPECT_NE(r.out.find("verdict: SLOWER beyond the 5% threshold: onednn +30.0%"), std::string::npos) << r.out;
  json c = read_json(path("cmp.json"));
  EXPECT_EQ(c["schema"], "mosaic.compare/1");
  EXPECT_EQ(c["slower"], true);
  EXPECT_EQ(c["configs"][0]["iteration_ms"]["verdict"], "no detectable difference");  // im2col untouched
  EXPECT_EQ(c["configs"][1]["iteration_ms"]["verdict"], "SLOWER");
  EXPECT_NEAR(c["configs"][1]["iteration_ms"]["change"].get<double>(), 0.3, 1e-9);
  // A 30% slowdown is not a regression at a 40% threshold.
  EXPECT_EQ(mosaic("compare " + path("a.json") + " " + path("slow.json") + " --threshold 40").code, 0);

  r = mosaic("compare " + path("a.json") + " " + path("fast.json"));
  EXPECT_EQ(r.code, 0) << r.out;  // faster never fails the gate
  EXPECT_NE(r.out.find("verdict: faster beyond the 5% threshold: im2col -40.0%"), std::string::npos) << r.out;

  // One node three times slower: named per node; the iteration time did not move.
  r = mosaic("compare " + path("a.json") + " " + path("node.json") + " --json " + path("cmp.json"));
  EXPECT_EQ(r.code, 0) << r.out;
  c = read_json(path("cmp.json"));
  int slower_nodes = 0;
  for (const auto& n : c["configs"][0]["nodes_us"]) {
    if (n["verdict"] == "SLOWER") {
      ++slower_nodes;
      EXPECT_EQ(n["name"], "conv1+relu1");
    }
  }
  EXPECT_EQ(slower_nodes, 1) << r.out;

  // Different settings are compared, with a warning.
  json other = a;
  const int threads = a["threads"].get<int>();
  other["threads"] = threads + 1;
  std::ofstream(path("other.json")) << other.dump();
  // Different settings are refused (the difference would be theirs), unless --force: then with a warning.
  r = mosaic("compare " + path("a.json") + " " + path("other.json"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("A and B differ in threads (" + std::to_string(threads) + " vs " + std::to_string(threads + 1) +
                       "): a difference in time would be the settings'"),
            std::string::npos)
      << r.out;
  json other_mode = a;
  other_mode["mode"] = "training";
  other_mode["batch"] = 16;
  std::ofstream(path("other_mode.json")) << other_mode.dump();
  r = mosaic("compare " + path("a.json") + " " + path("other_mode.json"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("differ in mode (inference vs training), batch ("), std::string::npos) << r.out;
  json fewer = a;
  fewer["runs"].erase(fewer["runs"].begin());
  std::ofstream(path("fewer.json")) << fewer.dump();
  r = mosaic("compare " + path("a.json") + " " + path("fewer.json"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("differ in backends ("), std::string::npos) << r.out;
  r = mosaic("compare " + path("a.json") + " " + path("other.json") + " --force");
  EXPECT_NE(r.out.find("warning: threads differs: " + std::to_string(threads) + " vs " + std::to_string(threads + 1)),
            std::string::npos) << r.out;

  // A run measured beside other work is named as such next to the verdicts.
  json quiet = a, busy = a;
  for (auto& run : quiet["runs"]) run["summary"]["others_cpu"] = 0.0;
  busy["runs"] = quiet["runs"];
  busy["runs"][1]["summary"]["others_cpu"] = 0.5;
  std::ofstream(path("quiet.json")) << quiet.dump();
  std::ofstream(path("busy.json")) << busy.dump();
  r = mosaic("compare " + path("quiet.json") + " " + path("busy.json"));
  EXPECT_NE(r.out.find("warning: onednn in B was CONTENDED: other processes used 50% of the machine"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("in A was CONTENDED"), std::string::npos) << r.out;
}

TEST_F(History, CompareTestsProcessesWhenBothRunsHaveThree) {
  CmdResult r = bench("--processes 3 --json " + path("a.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  json a = read_json(path("a.json"));
  ASSERT_EQ(a["processes"].size(), 3u);
  ASSERT_TRUE(a["processes"][0]["runs"]["onednn"]["node_median_us"].contains("conv1+relu1")) << a["processes"][0].dump();
  // The measured spread between processes is the machine's (one CI run had a process whose conv1
  // median was several times the others'), so the verdicts below would depend on it. Give the
  // three processes a fixed spread instead: process p's figures are process 0's times 1, 1.05,
  // 0.95. The statistics path is then exercised on known inputs.
  const double spread[3] = {1.0, 1.05, 0.95};
  for (std::size_t p = 0; p < 3; ++p)
    for (auto& [backend, run] : a["processes"][p]["runs"].items()) {
      const json& first = a["processes"][0]["runs"][backend];
      run["median_ms"] = first["median_ms"].get<double>() * spread[p];
      for (auto& [name, v] : run["node_median_us"].items())
        v = first["node_median_us"][name].get<double>() * spread[p];
    }
  std::ofstream(path("a.json")) << a.dump();
  // B: every process's onednn figures 3x slower.
  json b = a;
  for (auto& p : b["processes"]) {
    auto& run = p["runs"]["onednn"];
    run["median_ms"] = run["median_ms"].get<double>() * 3;
    for (auto& [name, v] : run["node_median_us"].items()) v = v.get<double>() * 3;
  }
  std::ofstream(path("b.json")) << b.dump();
  r = mosaic("compare " + path("a.json") + " " + path("b.json") + " --json " + path("cmp.json"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("Welch's t-test on the log of each process's median (3 vs 3 processes)"), std::string::npos) << r.out;
  const json c = read_json(path("cmp.json"));
  EXPECT_EQ(c["test"], "welch-log-process-medians");
  EXPECT_EQ(c["configs"][1]["iteration_ms"]["verdict"], "SLOWER");
  EXPECT_EQ(c["configs"][1]["iteration_ms"]["unit"], "process");
  EXPECT_NEAR(c["configs"][1]["iteration_ms"]["change"].get<double>(), 2.0, 1e-9);
  EXPECT_EQ(c["configs"][0]["iteration_ms"]["verdict"], "no detectable difference");
  for (const auto& n : c["configs"][1]["nodes_us"]) {
    EXPECT_EQ(n["unit"], "process");
    EXPECT_NEAR(n["change"].get<double>(), 2.0, 1e-9) << n.dump();
    EXPECT_NE(n["verdict"], "faster") << n.dump();
  }
  EXPECT_EQ(c["configs"][1]["nodes_us"][0]["verdict"], "SLOWER") << c["configs"][1]["nodes_us"][0].dump();  // conv1
  // One process each: the raw-sample test, with its caveat.
  json single = a;
  single.erase("processes");
  std::ofstream(path("single.json")) << single.dump();
  r = mosaic("compare " + path("a.json") + " " + path("single.json"));
  EXPECT_NE(r.out.find("Mann-Whitney U on the raw samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("A has 3 processes, B 1"), std::string::npos) << r.out;
}

TEST_F(History, BadInputIsRefusedWithTheFileOrRunNamed) {
  ASSERT_EQ(bench().code, 0);
  CmdResult r = mosaic("compare 1 7 --db " + db_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("run 7 is not in " + db_ + " (it has runs 1 to 1)"), std::string::npos) << r.out;
  r = mosaic("compare last~3 last --db " + db_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("fewer than 4 bench runs recorded"), std::string::npos) << r.out;
  r = mosaic("compare 1 2 --db " + path("none.sqlite"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("none.sqlite: no results store here"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("none.sqlite")));  // reading never creates a store
  r = mosaic("history --db " + path("none.sqlite"));
  EXPECT_EQ(r.code, 2);
  r = mosaic("compare 1 " + path("missing.json") + " --db " + db_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("missing.json: no such run id or file"), std::string::npos) << r.out;
  std::ofstream(path("gc.json")) << R"({"schema": "mosaic.gradcheck/1"})";
  r = mosaic("compare 1 " + path("gc.json") + " --db " + db_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("not a bench report (schema 'mosaic.gradcheck/1')"), std::string::npos) << r.out;
  std::ofstream(path("text.json")) << "not json";
  r = mosaic("compare 1 " + path("text.json") + " --db " + db_);
  EXPECT_NE(r.out.find("text.json: not JSON"), std::string::npos) << r.out;
  r = mosaic("compare 1 1 --db " + db_ + " --alpha 1.5");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--alpha: must be in (0, 1), got 1.5"), std::string::npos) << r.out;
  r = mosaic("history --db " + db_ + " --kind gradcheck");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--kind must be bench, train, sweep, generate or loadgen"), std::string::npos) << r.out;

  // A file that is not a database, and an explicit --db that cannot be written, fail before
  // any benchmarking, naming the file.
  std::ofstream(path("bogus.sqlite")) << "this is not a database, just some text long enough to have a header";
  r = mosaic("bench zoo:fmnist-cnn --backends im2col --iterations 5 --no-check --db " + path("bogus.sqlite"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("bogus.sqlite"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("images/s"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --backends im2col --iterations 5 --no-check --db " + path("no/such/dir.sqlite"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--db " + path("no/such/dir.sqlite") + ": directory"), std::string::npos) << r.out;
  r = mosaic("history --db " + path("bogus.sqlite"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("bogus.sqlite"), std::string::npos) << r.out;

  // A store from a newer Mosaic is refused, not reinterpreted.
  r = mosaic_shell("sqlite3 " + db_ + " \"UPDATE meta SET value = '99' WHERE key = 'schema_version'\"");
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic("history --db " + db_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("results store version 99 is newer than this mosaic's (1)"), std::string::npos) << r.out;
}

TEST_F(History, CompareRefusesNegativeTimesAndWronglyTypedFields) {
  // A report whose samples went negative (hand-edited, or another tool's) printed "faster
  // -4603%"; a label of the wrong type ended in a raw JSON library error with no name.
  ASSERT_EQ(bench().code, 0);
  CmdResult r = mosaic("history --db " + db_ + " --show 1");
  ASSERT_EQ(r.code, 0) << r.out;
  auto doc = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << r.out;
  ASSERT_FALSE(doc["runs"][0]["samples"]["iteration_ms"].empty());
  nlohmann::json negative = doc;
  negative["runs"][0]["samples"]["iteration_ms"][0] = -5.0;
  std::ofstream(path("negative.json")) << negative.dump();
  r = mosaic("compare 1 " + path("negative.json") + " --db " + db_);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("`runs[0].samples.iteration_ms[0]` is -5.0: a time must be a finite number >= 0"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("faster"), std::string::npos) << r.out;
  nlohmann::json typed = doc;
  typed["runs"][0]["label"] = 3;
  std::ofstream(path("typed.json")) << typed.dump();
  r = mosaic("compare " + path("typed.json") + " 1 --db " + db_);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("`runs[0].label` is 3, not a string"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("typed.json"), std::string::npos) << "names the file: " << r.out;
}

TEST_F(History, ReportRefusesBadInputAndWritesNothing) {
  CmdResult r = bench("--json " + path("a.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string out = path("r.html");
  std::ofstream(path("gc.json")) << R"({"schema": "mosaic.gradcheck/1"})";
  r = mosaic("report " + path("gc.json") + " -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("gc.json: not a bench, train, sweep or generate document (schema 'mosaic.gradcheck/1')"), std::string::npos) << r.out;
  fs::create_directories(path("empty"));
  r = mosaic("report " + path("empty") + " -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("empty: a directory without sweep.json"), std::string::npos) << r.out;
  r = mosaic("report 5 -o " + out + " --db " + db_);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("run 5 is not in"), std::string::npos) << r.out;
  r = mosaic("report " + path("a.json") + " -o " + path("no/dir/r.html"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("-o " + path("no/dir/r.html") + ": directory"), std::string::npos) << r.out;
  // The plotting Python fails, or cannot be started: a clear error, no page.
  r = mosaic_shell("MOSAIC_PYTHON=/bin/false " + std::string(MOSAIC_BIN) + " report " + path("a.json") + " -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("report: drawing the figures failed (exit 1)"), std::string::npos) << r.out;
  r = mosaic_shell("MOSAIC_PYTHON=/no/such/python " + std::string(MOSAIC_BIN) + " report " + path("a.json") + " -o " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("cannot run /no/such/python"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  // A newer schema version is refused, not read as an older one; a field of the wrong type
  // names the file (it was nlohmann's bare message); a missing field costs its figure, named
  // in a note (it was a Python traceback), and the page is written.
  auto doc = nlohmann::json::parse(read_all(path("a.json")));
  nlohmann::json newer = doc;
  newer["schema"] = "mosaic.bench/9";
  std::ofstream(path("newer.json")) << newer.dump();
  r = mosaic("report " + path("newer.json") + " -o " + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("newer.json: schema 'mosaic.bench/9' is a version this mosaic does not read"), std::string::npos)
      << r.out;
  nlohmann::json typed = doc;
  typed["batch"] = "sixteen";
  std::ofstream(path("typed.json")) << typed.dump();
  r = mosaic("report " + path("typed.json") + " -o " + out);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("typed.json: a field of the run has the wrong type"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Traceback"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
  nlohmann::json missing = doc;
  for (auto& run : missing["runs"]) run.erase("summary");
  std::ofstream(path("missing.json")) << missing.dump();
  r = mosaic("report " + path("missing.json") + " -o " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("Traceback"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not drawn: the field 'summary' is missing"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out));
}

}  // namespace
}  // namespace mosaic::test
