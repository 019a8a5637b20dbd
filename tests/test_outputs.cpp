// The CLI's side of hardening (docs/cli.md, "Output files", "Numbers", "Usage"): outputs that are
// whole or absent, numbers and options that make sense, usage where people look for it. Every case here was a finding: a run
// that exited 0 with an empty CSV on a full disk, a failed write that truncated the previous
// report, NaN tolerances that let every comparison pass, /dev/null-journal, and so on.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

class Outputs : public ScratchDirTest {
 protected:
  Outputs() : ScratchDirTest("mosaic_outputs_") {}
  static std::string quick_bench() {
    return "bench zoo:fmnist-cnn --backends naive --batch 1 --iterations 1 --warmup 0 --no-peaks --no-db";
  }
};

TEST_F(Outputs, JsonDashIsStandardOutputAndThePeopleReportGoesToStderr) {
  const std::string out = path("stdout"), err = path("stderr");
  // In a subshell: mosaic_shell appends 2>&1 to the whole line.
  CmdResult r = mosaic_shell("(" + std::string(MOSAIC_BIN) + " " + quick_bench() + " --json - > " + out + " 2> " + err + ")");
  ASSERT_EQ(r.code, 0) << read_all(err);
  const auto doc = nlohmann::json::parse(read_all(out), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "stdout is exactly the JSON:\n" << read_all(out).substr(0, 400);
  EXPECT_EQ(doc.value("model", ""), "zoo:fmnist-cnn");
  EXPECT_NE(read_all(err).find("summary:"), std::string::npos) << "the report for people is on stderr";
  EXPECT_FALSE(fs::exists("-")) << "no file named '-'";
  // The CSV too; both on stdout at once is refused.
  r = mosaic_shell("(" + std::string(MOSAIC_BIN) + " " + quick_bench() + " --csv - 2>/dev/null)");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("config,node,op,backend"), std::string::npos) << r.out.substr(0, 300);
  r = mosaic(quick_bench() + " --csv - --json -");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("name the same file -"), std::string::npos) << r.out;
}

TEST_F(Outputs, AFailedWriteIsAnErrorAndLeavesThePreviousFileWhole) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  CmdResult r = mosaic(quick_bench() + " --csv /dev/full");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("/dev/full: write failed: No space left on device"), std::string::npos) << r.out;
  // A regular file on a full disk: RLIMIT_FSIZE stands in for the disk (1 KiB; the report is
  // larger), SIGXFSZ ignored so that the write fails with EFBIG instead of killing the process.
  const std::string json = path("r.json");
  ASSERT_EQ(mosaic(quick_bench() + " --json " + json).code, 0);
  const std::string before = read_all(json);
  ASSERT_GT(before.size(), 1024u);
  r = mosaic_shell("trap '' XFSZ; ulimit -f 1; " + std::string(MOSAIC_BIN) + " " + quick_bench() + " --seed 7 --json " +
                   json);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(json + ": write failed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the previous file, if any, is untouched"), std::string::npos) << r.out;
  EXPECT_EQ(read_all(json), before) << "the previous report is whole";
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
}

TEST_F(Outputs, UnwritableOutputsAndStoresAreRefusedBeforeAnyWork) {
  struct Case {
    std::string args, message;
  } cases[] = {
      {quick_bench() + " --json /proc/x.json", "--json /proc/x.json: not writable (cannot create a file in /proc"},
      {"bench zoo:fmnist-cnn --backends naive --db /dev/null", "--db /dev/null: is not a regular file"},
      {"bench zoo:fmnist-cnn --backends naive --db " + path("x.db") + " --no-db", "--db and --no-db contradict"},
  };
  for (const auto& c : cases) {
    CmdResult r = mosaic(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.find("benchmarking"), std::string::npos) << "refused before timing: " << c.args;
  }
  EXPECT_FALSE(fs::exists("/dev/null-journal"));
  EXPECT_FALSE(fs::exists(path("x.db")));
}

TEST_F(Outputs, NonFiniteAndOutOfRangeNumbersAreRefusedReadably) {
  const std::string relu = "/usr/share/libonnx-testdata/data/node/test_relu";
  struct Case {
    std::string args, message;
  } cases[] = {
      {"verify " + relu + " --rtol nan", "--rtol: must be a finite number, got 'nan'"},
      {"verify " + relu + " --atol inf", "--atol: must be a finite number, got 'inf'"},
      {"verify " + relu + " --rtol -1", "--rtol: must be >= 0, got -1"},
      {"bench zoo:fmnist-cnn --target-ci nan", "--target-ci: must be a finite number"},
      {"bench zoo:fmnist-cnn --max-seconds -3", "--max-seconds: must be > 0, got -3"},
      {"train zoo:fmnist-cnn --momentum 2", "--momentum: must be in [0, 1), got 2"},
      {"train zoo:fmnist-cnn --lr 0", "--lr: must be > 0, got 0"},
      {"train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --opt momentum=nan", "optimizer sgd: momentum nan is outside [0, 1)"},
      {"train zoo:fmnist-cnn --data synthetic:8,1,28,28,10 --optimizer adam --opt beta2=1", "beta2 1 is outside [0, 1)"},
      {"compare 1 2 --alpha 0", "--alpha: must be in (0, 1), got 0"},
  };
  for (const auto& c : cases) {
    CmdResult r = mosaic(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_LT(r.out.size(), 400u) << "no 300-digit bounds: " << r.out;
  }
}

TEST_F(Outputs, MoreThreadsThanCoresWarnsAndIsNeverCachedAsThePeak) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string cache = path("cache");
  const std::string threads = std::to_string(cores + 1);
  CmdResult r = mosaic_shell("MOSAIC_CACHE_DIR=" + cache + " " + MOSAIC_BIN +
                             " bench zoo:fmnist-cnn --backends naive --batch 1 --iterations 1 --warmup 0 --no-db --threads " +
                             threads + " 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("warning: --threads " + threads + " is more than the " + std::to_string(cores) + " cores"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("not cached: more threads than cores"), std::string::npos) << r.out;
  const std::string peaks = read_all(cache + "/peaks.json");
  EXPECT_EQ(peaks.find(" " + threads + " threads"), std::string::npos) << peaks;
}

TEST_F(Outputs, EveryUnsupportedOpIsNamedAtOnce) {
  // x -> Bernoulli -> ImageDecoder -> Bernoulli -> Relu: two op types Mosaic lacks, in
  // three nodes.
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int d : {2, 4}) in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  const std::vector<std::pair<std::string, std::string>> ops = {{"Bernoulli", ""}, {"ImageDecoder", ""}, {"Bernoulli", ""}, {"Relu", ""}};
  std::string prev = "x";
  for (size_t i = 0; i < ops.size(); ++i) {
    auto* n = g->add_node();
    n->set_op_type(ops[i].first);
    n->set_name("n" + std::to_string(i));
    n->add_input(prev);
    prev = "v" + std::to_string(i);
    n->add_output(prev);
  }
  g->add_output()->set_name(prev);
  const std::string file = path("unsupported.onnx");
  {
    std::ofstream f(file, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  for (const std::string cmd : {"info ", "bench ", "verify --per-node "}) {
    CmdResult r = mosaic(cmd + file);
    EXPECT_EQ(r.code, 2) << cmd << r.out;
    EXPECT_NE(r.out.find("node 'n0' (Bernoulli): operator Bernoulli is not supported"), std::string::npos) << cmd << r.out;
    EXPECT_NE(r.out.find("in all, 2 op types in 3 nodes are not supported: Bernoulli (2 nodes, first 'n0'), ImageDecoder "
                         "(1 node, first 'n1')"),
              std::string::npos)
        << cmd << r.out;
  }
}

TEST_F(Outputs, InterruptedBenchAndTrainKeepWhatFinished) {
  // bench: SIGINT during naive's long timing loop. What was measured is printed, written and
  // recorded, marked interrupted; the other backends do not run; exit 130.
  const std::string json = path("b.json"), db = path("runs.sqlite");
  CmdResult r = mosaic_shell("(" + std::string(MOSAIC_BIN) +
                             " bench zoo:fmnist-cnn --backends naive,im2col,onednn --batch 2 --no-peaks --iterations 1000000"
                             " --max-seconds 600 --warmup 0 --threads 1 --json " + json + " --db " + db +
                             " > " + path("b.out") + " 2>&1 & pid=$!; "
                             "for i in $(seq 100); do grep -q 'benchmarking naive' " + path("b.out") +
                             " && break; sleep 0.1; done; sleep 1; kill -INT $pid; wait $pid; echo rc=$?)");
  const std::string out = read_all(path("b.out"));
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << out;
  EXPECT_NE(out.find("== naive"), std::string::npos) << out;
  EXPECT_NE(out.find("interrupted: the run was stopped"), std::string::npos) << out;
  EXPECT_EQ(out.find("benchmarking im2col"), std::string::npos) << "the rest did not run:\n" << out;
  auto doc = nlohmann::json::parse(read_all(json), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << read_all(json);
  EXPECT_EQ(doc.value("interrupted", false), true);
  EXPECT_EQ(doc["runs"].size(), 1u) << "naive, up to the signal";
  r = mosaic("history --db " + db);
  EXPECT_NE(r.out.find("zoo:fmnist-cnn"), std::string::npos) << "recorded: " << r.out;
  // train under SIGTERM: the finished epochs are written; exit 143.
  const std::string tjson = path("t.json");
  r = mosaic_shell("(" + std::string(MOSAIC_BIN) +
                   " train zoo:fmnist-cnn --data synthetic:256,1,28,28,10 --batch 16 --epochs 100000 --no-db --no-eval "
                   "--threads 1 --json " + tjson + " > " + path("t.out") + " 2>&1 & pid=$!; "
                   "for i in $(seq 300); do grep -q '^epoch 2:' " + path("t.out") + " && break; sleep 0.1; done; "
                   "kill -TERM $pid; wait $pid; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out << read_all(path("t.out"));
  doc = nlohmann::json::parse(read_all(tjson), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << read_all(path("t.out"));
  EXPECT_EQ(doc.value("interrupted", false), true);
  EXPECT_GE(doc["epochs"].size(), 2u);
}

TEST_F(Outputs, InterruptedSweepStopsAtACellBoundaryAndWritesItsTables) {
  // SIGINT as the second of two cells starts (im2col's first cell takes a second, naive's second
  // one about ten): the first cell is recorded, the second (cut short) is not, the tables and
  // sweep.json are written, the run is recorded, exit 130. Before, the signal killed the sweep
  // with nothing written.
  const std::string cfg = path("grid.yaml"), db = path("runs.sqlite");
  {
    std::ofstream f(cfg);
    f << "name: interrupted\noutput: " << path("out") << "\ndata: synthetic:1024,1,28,28,10\nmodels: zoo:fmnist-cnn\n"
      << "backends: [im2col, naive]\noptimizers: sgd\nlr: 0.01\nbatch: 8\nepochs: 1\nsteps_per_epoch: 100\n"
      << "accuracy_epochs: [1]\nthreads: 1\n";
  }
  CmdResult r = mosaic_shell("(" + std::string(MOSAIC_BIN) + " sweep " + cfg + " --db " + db + " > " + path("s.out") +
                             " 2>&1 & pid=$!; for i in $(seq 600); do grep -q '^\\[2/2\\] .* \\.\\.\\.' " +
                             path("s.out") + " && break; sleep 0.05; done; kill -INT $pid; wait $pid; echo rc=$?)");
  const std::string out = read_all(path("s.out"));
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << out;
  EXPECT_NE(out.find("interrupted (run again to resume)"), std::string::npos) << out;
  EXPECT_NE(out.find("[2/2] zoo:fmnist-cnn naive batch 8 sgd lr 0.01: interrupted; not recorded"), std::string::npos)
      << out;
  EXPECT_TRUE(std::filesystem::exists(path("out") + "/table2.md")) << out;
  auto doc = nlohmann::json::parse(read_all(path("out") + "/sweep.json"), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << out;
  EXPECT_EQ(doc.value("complete", true), false);
  ASSERT_EQ(doc["cells"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["cells"][0]["backend"], "im2col");
  r = mosaic("history --db " + db);
  EXPECT_NE(r.out.find("sweep"), std::string::npos) << "recorded: " << r.out;
}

TEST_F(Outputs, InterruptedBenchProcessesPoolsTheProcessesThatFinished) {
  // bench --processes 3, Ctrl-C (SIGINT to the whole process group, as a terminal sends it)
  // while the second process runs: the child gets one signal (from the parent: it runs in its
  // own group) and is left out; the first is pooled, written and recorded, marked interrupted;
  // no third process starts, no child is left behind, the scratch folder goes. Exit 130.
  const std::string json = path("p.json"), db = path("runs.sqlite"), err = path("p.err");
  const std::string bench = std::string(MOSAIC_BIN) +
                            " bench zoo:fmnist-cnn --backends onednn --processes 3 --batch 2 --iterations 1000000"
                            " --warmup 1 --no-peaks --threads 1 --json " + json + " --db " + db + " --max-seconds ";
  // `kill`: the signal and its target ("-INT -$pid": the group, as a terminal's Ctrl-C;
  // "-TERM $pid": the parent alone, as a job scheduler may send it). Prints rc= and the
  // seconds from the signal to the end.
  auto run = [&](const std::string& wait_for, const std::string& kill = "-INT -$pid", const std::string& seconds = "8") {
    return mosaic_shell("(setsid " + bench + seconds + " > " + path("p.out") + " 2> " + err + " & pid=$!; "
                        "for i in $(seq 300); do grep -q '" + wait_for + "' " + err + " && break; sleep 0.1; done; sleep 1; "
                        "t0=$(date +%s); kill " + kill + "; wait $pid; echo rc=$? s=$(( $(date +%s) - t0 )); sleep 0.5; "
                        "pgrep -f 'mosaic_processes_'$pid >/dev/null && echo CHILD-LEFT; "
                        "test -e /tmp/mosaic_processes_$pid && echo DIR-LEFT; true)");
  };
  CmdResult r = run("process 2/3");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << read_all(err);
  EXPECT_EQ(r.out.find("CHILD-LEFT"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("DIR-LEFT"), std::string::npos) << r.out;
  EXPECT_NE(read_all(err).find("process 2 was stopped (SIGINT) and is left out"), std::string::npos) << read_all(err);
  EXPECT_EQ(read_all(err).find("process 3/3"), std::string::npos) << read_all(err);
  auto doc = nlohmann::json::parse(read_all(json), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << read_all(err);
  EXPECT_EQ(doc.value("interrupted", false), true);
  EXPECT_EQ(doc["config"]["processes"], 1);
  EXPECT_EQ(doc["processes"].size(), 1u);
  EXPECT_NE(mosaic("history --db " + db).out.find("zoo:fmnist-cnn"), std::string::npos) << "recorded";
  // Stopped in the first process: nothing to pool; no report is written.
  std::filesystem::remove(json);
  r = run("process 1/3");
  EXPECT_NE(r.out.find("rc=130"), std::string::npos) << r.out << read_all(err);
  EXPECT_NE(read_all(err).find("interrupted before a process finished: nothing to pool"), std::string::npos) << read_all(err);
  EXPECT_FALSE(std::filesystem::exists(json));
  EXPECT_EQ(r.out.find("CHILD-LEFT"), std::string::npos) << r.out;
  // SIGTERM to the parent alone: it passes the signal on, so the child stops at once instead
  // of measuring for its whole 20 s budget.
  r = run("process 1/3", "-TERM $pid", "20");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out << read_all(err);
  const size_t at = r.out.find(" s=");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_LE(std::stoi(r.out.substr(at + 3)), 5) << "the child ran on after the signal: " << r.out;
  EXPECT_EQ(r.out.find("CHILD-LEFT"), std::string::npos) << r.out;
}

TEST_F(Outputs, KilledTrainingLeavesItsFinishedEpochs) {
  // SIGKILL (the OOM killer, or mpirun one second after its SIGTERM) cannot be caught: --json
  // is written after every epoch, marked interrupted until the final write replaces it.
  const std::string json = path("k.json");
  CmdResult r = mosaic_shell("(" + std::string(MOSAIC_BIN) +
                             " train zoo:fmnist-cnn --data synthetic:256,1,28,28,10 --batch 16 --epochs 100000 --no-db "
                             "--no-eval --threads 1 --json " + json + " > " + path("k.out") + " 2>&1 & pid=$!; "
                             "for i in $(seq 300); do grep -q '^epoch 2:' " + path("k.out") + " && break; sleep 0.1; done; "
                             "kill -KILL $pid; wait $pid; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=137"), std::string::npos) << r.out;
  auto doc = nlohmann::json::parse(read_all(json), nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << read_all(path("k.out"));
  EXPECT_EQ(doc.value("interrupted", false), true);
  ASSERT_GE(doc["epochs"].size(), 2u);
  EXPECT_EQ(doc["written_after_epoch"], doc["epochs"].size());
  // A run that ends normally replaces it: no mark.
  r = mosaic("train zoo:fmnist-cnn --data synthetic:64,1,28,28,10 --batch 16 --epochs 2 --no-db --no-eval --threads 1 "
             "--json " + json);
  ASSERT_EQ(r.code, 0) << r.out;
  doc = nlohmann::json::parse(read_all(json), nullptr, false);
  EXPECT_FALSE(doc.contains("interrupted"));
  EXPECT_FALSE(doc.contains("written_after_epoch"));
  EXPECT_EQ(doc["epochs"].size(), 2u);
}

TEST(Habits, VerifyEndsWithATallyPerBackendAndWhatIsNotSupported) {
  const std::string suite = "/usr/share/libonnx-testdata/data/node";
  if (!std::filesystem::exists(suite)) GTEST_SKIP() << "libonnx-testdata not installed";
  CmdResult r = mosaic("verify " + suite + " --backend naive,im2col --filter '^test_(relu|argmax_default_axis_example|bernoulli|cast_FLOAT_to_STRING)$' --quiet");
  // --backend takes one backend or all: a list is refused by name.
  EXPECT_EQ(r.code, 2) << r.out;
  r = mosaic("verify " + suite + " --backend all --filter '^test_(relu|argmax_default_axis_example|bernoulli|cast_FLOAT_to_STRING)$' --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("per backend:  naive 2 passed, 0 failed, 2 skipped;  im2col 1 passed, 0 failed, 3 skipped;"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("not supported by Mosaic, by cases: Bernoulli 1, element type STRING 1 (2 ops)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("no kernel for ArgMax on: im2col, onednn, torch"), std::string::npos) << r.out;
  const std::string last_line = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  EXPECT_NE(last_line.find(" passed, "), std::string::npos) << "the last line stays the count: " << last_line;
}

TEST_F(Outputs, ReportMarksContendedRunsSplitsFarApartBackendsAndDrawsARunOnce) {
  const std::string a = path("a.json");
  ASSERT_EQ(mosaic("bench zoo:fmnist-cnn --backends naive,onednn --batch 2 --iterations 3 --warmup 1 --no-db --no-peaks "
                   "--json " + a).code, 0);
  auto doc = nlohmann::json::parse(read_all(a));
  for (auto& run : doc["runs"]) run["summary"]["others_cpu"] = run["label"] == "onednn" ? 0.6 : 0.0;
  // naive 1000x slower than onednn: one panel per backend, each on its own scale.
  for (auto& n : doc["runs"][0]["nodes"])
    if (n["median_us"].is_number()) n["median_us"] = n["median_us"].get<double>() * 1000;
  std::ofstream(a) << doc.dump();
  CmdResult r = mosaic("report " + a + " " + a + " -o " + path("r.html"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("is " + a + " again; drawn once"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 runs in"), std::string::npos) << r.out;
  const std::string html = read_all(path("r.html"));
  EXPECT_NE(html.find("CONTENDED: other processes used the machine while onednn (CONTENDED) was measured"),
            std::string::npos);
  EXPECT_NE(html.find("one panel per backend, each on its own scale"), std::string::npos);
}

TEST(Habits, BenchRanksTheBackendsAndQuietPrintsOnlyTheSummary) {
  // Which backend ranks first is the machine's business (a loaded machine has put onednn behind
  // naive at batch 2): the ranking must list both, fastest first, with the slower's ratio.
  auto check_ranking = [](const std::string& out) {
    const size_t at = out.find("ranking (median iteration, fastest first): 1. ");
    ASSERT_NE(at, std::string::npos) << out;
    const std::string line = out.substr(at, out.find('\n', at) - at);
    EXPECT_NE(line.find("naive"), std::string::npos) << line;
    EXPECT_NE(line.find("onednn"), std::string::npos) << line;
    EXPECT_NE(line.find(", 2. "), std::string::npos) << line;
    EXPECT_NE(line.find("x)"), std::string::npos) << line;
  };
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backends naive,onednn --batch 2 --iterations 3 --warmup 1 --no-peaks --no-db");
  ASSERT_EQ(r.code, 0) << r.out;
  check_ranking(r.out);
  r = mosaic("bench zoo:fmnist-cnn --backends naive,onednn --batch 2 --iterations 3 --warmup 1 --no-peaks --no-db --quiet");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("images/s  median"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check ok"), std::string::npos) << r.out;
  check_ranking(r.out);
  EXPECT_EQ(r.out.find("node "), std::string::npos) << "no per-node table: " << r.out;
  EXPECT_EQ(r.out.find("reproduce:"), std::string::npos) << r.out;
}

TEST(Habits, BareMosaicAndHelpPrintUsageAndEveryHelpEndsWithExamples) {
  CmdResult r = mosaic("");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Usage: mosaic [OPTIONS] SUBCOMMAND"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mosaic help COMMAND"), std::string::npos) << r.out;
  r = mosaic("help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Subcommands:"), std::string::npos) << r.out;
  r = mosaic("help nosuch");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("no command 'nosuch' (commands: info, bench"), std::string::npos) << r.out;
  for (const char* cmd : {"info", "bench", "verify", "export", "train", "gradcheck", "optcheck", "sweep", "history",
                          "compare", "report", "simulate", "plan", "backends"}) {
    r = mosaic(std::string("help ") + cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.out;
    const size_t examples = r.out.find("Examples:\n  mosaic " + std::string(cmd));
    EXPECT_NE(examples, std::string::npos) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("Documentation: docs/", examples), std::string::npos) << cmd << "\n" << r.out;
    EXPECT_EQ(mosaic(std::string(cmd) + " --help").out, r.out) << "help CMD is CMD --help";
  }
}

TEST(Habits, BackendAndBackendsAreOneOptionAndTyposGetTheFullList) {
  // --backend where bench says --backends, and the reverse: both spellings everywhere.
  CmdResult r = mosaic("bench zoo:fmnist-cnn --backend naive --batch 1 --iterations 1 --warmup 0 --no-peaks --no-db");
  EXPECT_EQ(r.code, 0) << r.out;
  r = mosaic("plan zoo:fmnist-cnn --backends im2col");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* cmd : {"verify", "train", "gradcheck", "optcheck", "simulate", "plan"})
    EXPECT_NE(mosaic(std::string(cmd) + " --help").out.find("--backend,--backends"), std::string::npos) << cmd;
  // A typo: every backend named (the bundled plugin's too, which a typo does not load), and a guess.
  r = mosaic("bench zoo:fmnist-cnn --backends OneDNN");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown backend 'OneDNN' (known: naive"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("did you mean onednn?"), std::string::npos) << r.out;
  if (!bundled_plugins().empty()) {
    EXPECT_NE(r.out.find("torch (bundled plugin)"), std::string::npos) << r.out;
  }
  r = mosaic("verify /nonexistent --backend imcol");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("did you mean im2col?"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mosaic::test
