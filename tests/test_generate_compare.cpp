// `mosaic compare` and `mosaic report` on generate runs (mosaic.generate/1): the verdicts on
// generations with a known change in the decode step or the first token, per context depth,
// every refusal by name, and both commands end to end on real runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "api/generate.hpp"
#include "metrics/run_compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using nlohmann::json;

/// `n` values around `median` (symmetric, so the median is exact), `rel` apart at the ends.
std::vector<double> around(double median, int n, double rel = 0.02) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(median * (1 + rel * (static_cast<double>(i) / (n - 1) - 0.5)));
  return v;
}

/// A run's token times: the first token at `ttft`, then the decode steps one after another.
json run_of(double ttft, const std::vector<double>& steps) {
  std::vector<double> t{ttft};
  for (double s : steps) t.push_back(t.back() + s);
  return {{"token_ms", t}};
}

/// A generation of `runs` runs, each with the same decode steps around `step` ms, the first
/// tokens around `ttft` ms.
json generation(int runs, double ttft, double step, const std::string& backend = "onednn", int batch = 1) {
  json r = json::array();
  const std::vector<double> firsts = around(ttft, std::max(runs, 2));
  for (int i = 0; i < runs; ++i) r.push_back(run_of(firsts[static_cast<size_t>(i)], around(step, 20)));
  return {{"schema", "mosaic.generate/1"},
          {"model", "zoo:gpt2-tiny"},
          {"backend", backend},
          {"decoding", "kv-cache"},
          {"settings", {{"batch", batch}, {"prompt_tokens", 16}, {"new_tokens", 21}, {"sampling", "greedy"}, {"runs", runs}}},
          {"runs", r}};
}

const ConfigComparison& config(const RunComparison& r, const std::string& label) {
  for (const auto& c : r.configs)
    if (c.label == label) return c;
  static const ConfigComparison none;
  ADD_FAILURE() << "no configuration '" << label << "'";
  return none;
}

TEST(GenerateCompare, ASlowerDecodeStepIsSlowerAndThreeFirstTokensAreTooFew) {
  auto r = compare_generate_runs(generation(3, 50, 10), generation(3, 50, 12), CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->kind, "generate");
  ASSERT_EQ(r->configs.size(), 2u);
  const TimingComparison& step = config(*r, "decode step").total;
  EXPECT_EQ(step.verdict, Change::kSlower);
  EXPECT_NEAR(step.change, 0.2, 1e-9);
  EXPECT_EQ(step.n_a, 60u);  // 20 steps of each of 3 runs
  EXPECT_EQ(step.unit, "decode step");
  EXPECT_EQ(config(*r, "first token").total.verdict, Change::kTooFewSamples);
  EXPECT_TRUE(r->slower());
  // The same generation again (another object, equal figures): nothing to report.
  json again = generation(3, 50, 10);
  again["provenance"] = {{"run", {{"time_utc", "later"}}}};
  r = compare_generate_runs(generation(3, 50, 10), again, CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(config(*r, "decode step").total.verdict, Change::kNone);
  EXPECT_FALSE(r->slower());
}

TEST(GenerateCompare, TenRunsTestTheFirstTokenOnItsOwn) {
  auto r = compare_generate_runs(generation(10, 50, 10), generation(10, 40, 10), CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TimingComparison& first = config(*r, "first token").total;
  EXPECT_EQ(first.verdict, Change::kFaster);
  EXPECT_NEAR(first.change, -0.2, 1e-9);
  EXPECT_EQ(first.n_a, 10u);
  EXPECT_EQ(config(*r, "decode step").total.verdict, Change::kNone);
  const json j = comparison_json(*r, CompareOptions{}, "A", "B");
  EXPECT_EQ(j["kind"], "generate");
  EXPECT_EQ(j["configs"][1]["time_ms"]["verdict"], "faster");
  EXPECT_EQ(j["configs"][1]["time_ms"]["unit"], "run");
  EXPECT_FALSE(j["configs"][0].contains("iteration_ms"));
}

TEST(GenerateCompare, AContextSweepIsComparedDepthByDepth) {
  auto sweep = [](std::vector<std::pair<int, double>> depths) {
    json g = generation(3, 50, 10);
    g["contexts"] = json::array();
    for (const auto& [depth, step] : depths) g["contexts"].push_back({{"context", depth}, {"runs", generation(3, 50, step)["runs"]}});
    return g;
  };
  auto r = compare_generate_runs(sweep({{8, 10}, {64, 20}}), sweep({{8, 10}, {128, 30}}), CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->configs.size(), 2u);
  EXPECT_EQ(r->configs[0].label, "decode step @ 8");
  EXPECT_EQ(r->configs[1].label, "first token @ 8");
  EXPECT_EQ(r->only_a, std::vector<std::string>{"context @ 64"});
  EXPECT_EQ(r->only_b, std::vector<std::string>{"context @ 128"});
  r = compare_generate_runs(sweep({{8, 10}, {64, 10}}), sweep({{8, 10}, {64, 13}}), CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(config(*r, "decode step @ 8").total.verdict, Change::kNone);
  EXPECT_EQ(config(*r, "decode step @ 64").total.verdict, Change::kSlower);
  r = compare_generate_runs(sweep({{8, 10}}), sweep({{16, 10}}), CompareOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("share no context depth"), std::string::npos) << r.status().message();
}

TEST(GenerateCompare, EveryRefusalNamesWhatIsWrong) {
  auto refused = [](const json& a, const json& b, const std::string& want, CompareOptions o = {}) {
    auto r = compare_generate_runs(a, b, o);
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  };
  const json a = generation(3, 50, 10);
  refused(a, generation(3, 50, 10, "im2col"), "differ in backend (onednn vs im2col)");
  refused(a, generation(3, 50, 10, "onednn", 8), "differ in batch (1 vs 8)");
  CompareOptions force;
  force.force = true;
  auto forced = compare_generate_runs(a, generation(3, 50, 10, "im2col"), force);
  ASSERT_TRUE(forced.ok()) << forced.status().message();
  EXPECT_EQ(forced->warnings, std::vector<std::string>{"backend differs: onednn vs im2col"});
  json bf16 = generation(3, 50, 10);
  bf16["settings"]["precision"] = "bf16";
  refused(a, bf16, "differ in precision (f32 vs bf16)");  // a document without it ran in float32
  json f32 = generation(3, 50, 10);
  f32["settings"]["precision"] = "f32";
  EXPECT_TRUE(compare_generate_runs(a, f32, {}).ok());
  refused(a, a, "A and B are the same run");
  refused(json{{"schema", "mosaic.bench/2"}}, a, "A: not a generate report (schema 'mosaic.bench/2')");
  json bad = generation(3, 50, 10);
  bad["runs"][1]["token_ms"][2] = 1.0;  // before the token ahead of it
  refused(a, bad, "B: `runs[1].token_ms[2]` is 1.0: token times are finite numbers >= 0 that never decrease");
  bad = generation(3, 50, 10);
  bad["runs"][0]["token_ms"][0] = -3;
  refused(a, bad, "`runs[0].token_ms[0]` is -3");
  bad = generation(3, 50, 10);
  bad["runs"][2] = {{"tokens", 3}};
  refused(a, bad, "`runs[2].token_ms` is missing or not a list");
  bad = generation(3, 50, 10);
  bad["contexts"] = json::array({{{"context", "deep"}}});
  refused(a, bad, "`contexts[0].context` is missing or not a whole number");
}

/// Two --processes runs: each process's TPOT and TTFT, Welch's t-test on their logs.
TEST(GenerateCompare, ThreeProcessesASideAreTestedByTheirMedians) {
  auto with_processes = [](std::vector<double> tpots, std::vector<double> ttfts) {
    json g = generation(3, 50, 10);
    g["processes"] = json::array();
    for (size_t i = 0; i < tpots.size(); ++i)
      g["processes"].push_back({{"process", i}, {"tpot_ms", tpots[i]}, {"ttft_ms", ttfts[i]}, {"decode_tokens_per_s", 0}});
    return g;
  };
  // Tight processes, B's 20% slower: SLOWER; the same change within processes that spread
  // +-15%: no detectable difference; the first token unchanged.
  auto r = compare_generate_runs(with_processes({10, 10.1, 9.9}, {50, 51, 49}), with_processes({12, 12.12, 11.88}, {50, 51, 49}),
                                 CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(r->by_process);
  EXPECT_EQ(r->processes_a, 3u);
  const TimingComparison& step = config(*r, "decode step").total;
  EXPECT_EQ(step.verdict, Change::kSlower);
  EXPECT_NEAR(step.change, 0.2, 1e-9);
  EXPECT_TRUE(step.by_process);
  EXPECT_EQ(config(*r, "first token").total.verdict, Change::kNone);
  r = compare_generate_runs(with_processes({10, 11.5, 8.5}, {50, 51, 49}), with_processes({12, 13.8, 10.2}, {50, 51, 49}),
                            CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(config(*r, "decode step").total.verdict, Change::kNone);
  // Two processes on one side: the samples' test, as for single runs.
  r = compare_generate_runs(with_processes({10, 10.1}, {50, 51}), with_processes({12, 12.1, 11.9}, {50, 51, 49}),
                            CompareOptions{});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->by_process);
  EXPECT_EQ(config(*r, "decode step").total.n_a, 60u);
}

/// generate --processes: the children's runs pooled, each process's medians kept, the document
/// read back as the report it was written from.
TEST(GenerateCompare, ProcessesArePooledAndTheDocumentReadsBack) {
  const std::string dir = ::testing::TempDir() + "generate_processes/";
  std::filesystem::create_directories(dir);
  CmdResult r = mosaic("generate zoo:gpt2-tiny-kv --backend naive --context 4,8 --new-tokens 4 --runs 2 --processes 3 "
                       "--no-db --no-peaks --json " + dir + "p.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 processes, TPOT per process"), std::string::npos) << r.out;
  const json doc = read_json(dir + "p.json");
  EXPECT_EQ(doc["settings"]["processes"], 3);
  EXPECT_EQ(doc["runs"].size(), 6u);                     // 2 runs of each of 3 processes
  EXPECT_EQ(doc["contexts"][1]["runs"].size(), 6u);
  ASSERT_EQ(doc["processes"].size(), 3u);
  EXPECT_EQ(doc["processes"][2]["contexts"][1]["context"], 8);
  // The pooled figures are the pooled runs' (recomputed, not the first process's).
  std::vector<api::GenerationRun> runs;
  for (const auto& x : doc["runs"]) runs.push_back({x["token_ms"].get<std::vector<double>>()});
  EXPECT_DOUBLE_EQ(doc["summary"]["tpot_ms"].get<double>(), api::run_figures(runs, 1, 4).tpot_ms);
  auto back = api::generate_report_from_json(doc);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(api::generate_report_json(back.value()), doc) << "the reader and the writer disagree";
  json broken = doc;
  broken["summary"].erase("tpot_ms");
  back = api::generate_report_from_json(broken);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("`summary` is missing a field"), std::string::npos) << back.status().message();
  r = mosaic("generate zoo:gpt2-tiny-kv --backend naive --processes 2 --per-node --no-db --no-peaks");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--per-node times one more generation in one process; it excludes --processes"), std::string::npos)
      << r.out;
  r = mosaic("generate zoo:gpt2-tiny-kv --backend naive --processes 0 --no-db");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--processes: must be a positive integer, got 0"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

/// Real generations of the tiny decoder: compared, and drawn with a context sweep.
TEST(GenerateCompare, CompareAndReportReadRealGenerations) {
  const std::string dir = ::testing::TempDir() + "generate_compare/";
  std::filesystem::create_directories(dir);
  for (const char* name : {"a", "b"}) {
    CmdResult r = mosaic("generate zoo:gpt2-tiny --backend naive --prompt-tokens 4 --new-tokens 6 --runs 2 --no-db --no-peaks --json " +
                         dir + name + ".json");
    ASSERT_EQ(r.code, 0) << r.out;
  }
  CmdResult r = mosaic("compare " + dir + "a.json " + dir + "b.json --json " + dir + "cmp.json");
  EXPECT_TRUE(r.code == 0 || r.code == 1) << r.out;  // 1 when this machine made B slower
  for (const char* want : {"naive, recompute, batch 1, prompt 4, 6 new tokens, 2 runs", "Mann-Whitney U on the decode steps",
                           "decode step", "first token", "too few samples"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  const json cmp = read_json(dir + "cmp.json");
  EXPECT_EQ(cmp["kind"], "generate");
  EXPECT_EQ(cmp["configs"][0]["time_ms"]["n_a"], 10);  // 5 steps of each of 2 runs
  // A generation beside a bench run is refused by name.
  r = mosaic("bench zoo:fmnist-cnn --backends naive --batch 1 --iterations 2 --warmup 1 --no-db --no-peaks --no-check --json " +
             dir + "bench.json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = mosaic("compare " + dir + "bench.json " + dir + "a.json");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("B: not a bench report (schema 'mosaic.generate/1')"), std::string::npos) << r.out;

  r = mosaic("generate zoo:gpt2-tiny --backend naive --context 4,8 --new-tokens 4 --runs 1 --no-db --no-peaks --json " + dir + "ctx.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(read_json(dir + "ctx.json")["contexts"][1]["runs"][0]["token_ms"].size(), 4u);
  r = mosaic("report " + dir + "a.json " + dir + "ctx.json -o " + dir + "r.html");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("report: 2 figures, 2 runs"), std::string::npos) << r.out;
  std::ifstream f(dir + "r.html");
  const std::string html((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (const char* want : {"Tokens/s vs context depth", "Inter-token latency CDF", "<td>8</td>", "generate of zoo:gpt2-tiny"})
    EXPECT_NE(html.find(want), std::string::npos) << want;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mosaic::test
