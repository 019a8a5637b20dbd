// `mosaic sweep`: grid, resume from the results store, Table 2/3 contents, config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "api/sweep_distributed.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

class Sweep : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mosaic_sweep_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  static std::string read(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  fs::path dir_;
};

const char* kGrid = R"(name: tiny
output: out
data: synthetic:48,1,28,28,10
models: zoo:fmnist-cnn
backends: [naive, im2col]
optimizers: [sgd, adam]
lr: [0.01, 1.0e30]
batch: 8
epochs: 2
steps_per_epoch: 2
accuracy_epochs: [1, 2]
)";

TEST_F(Sweep, RunsResumesAndWritesTables) {
  const std::string cfg = write("grid.yaml", kGrid);
  // Interrupted after 3 of 8 cells (--max-cells stands in for Ctrl-C between cells).
  CmdResult r = mosaic("sweep " + cfg + " --max-cells 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 cells run, 0 finished earlier"), std::string::npos) << r.out;
  r = mosaic("sweep " + cfg);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("5 cells run, 3 finished earlier"), std::string::npos) << r.out;
  r = mosaic("sweep " + cfg);
  EXPECT_NE(r.out.find("0 cells run, 8 finished earlier"), std::string::npos) << r.out;

  // Each table starts with the sweep's provenance as '#' lines; the data follows.
  auto body = [](std::string t) {
    EXPECT_EQ(t.rfind("# machine: ", 0), 0u) << t;
    while (t.rfind("#", 0) == 0) t = t.substr(t.find('\n') + 1);
    return t;
  };
  const std::string t2 = body(read(dir_ / "out" / "table2.csv")), t3 = body(read(dir_ / "out" / "table3.csv"));
  EXPECT_EQ(t2.rfind("model,backend,optimizer,lr,batch,epochs,mean_epoch_s,images_per_s,status\n", 0), 0u) << t2;
  EXPECT_EQ(std::count(t2.begin(), t2.end(), '\n'), 9);
  EXPECT_NE(t2.find("zoo:fmnist-cnn,im2col,adam,0.01,8,2,"), std::string::npos) << t2;
  EXPECT_EQ(t3.rfind("model,backend,batch,optimizer,lr,epoch_1,epoch_2,status\n", 0), 0u) << t3;
  // The diverging learning rate leaves blanks, as in the seed's Table 3.
  EXPECT_NE(t3.find("zoo:fmnist-cnn,naive,8,sgd,1e+30,,,diverged\n"), std::string::npos) << t3;
  const std::string md = read(dir_ / "out" / "table3.md");
  EXPECT_NE(md.find("| zoo:fmnist-cnn | naive | 8 | sgd | 1e+30 |  |  | diverged at epoch 1 step"), std::string::npos) << md;
  EXPECT_NE(read(dir_ / "out" / "table2.md").find("| batch 8 |"), std::string::npos);

  // A changed setting is a new cell, not a stale cached one.
  std::string more = kGrid;
  more.replace(more.find("epochs: 2"), 9, "epochs: 1");
  more.replace(more.find("accuracy_epochs: [1, 2]"), 23, "accuracy_epochs: [1]");
  r = mosaic("sweep " + write("grid.yaml", more) + " --max-cells 1");
  EXPECT_NE(r.out.find("1 cells run, 0 finished earlier"), std::string::npos) << r.out;
}

// The data-parallel axes: every (mode, workers) cell runs under mpirun; the speed-up table
// has one row per mode with 1 worker at 1.00x; a rerun finds every cell.
TEST_F(Sweep, RanksAndModeAxesRunUnderMpirunAndTabulateSpeedup) {
  allow_mpirun();  // containers, parallel tests (test_util.hpp)
  const std::string cfg = write("ranks.yaml", R"(name: scaling
output: out
data: synthetic:200,1,28,28,10
models: zoo:fmnist-cnn
batch: 8
epochs: 2
steps_per_epoch: 3
evaluate: false
threads: 1
ranks: [1, 2]
mode: [allreduce, ps]
)");
  CmdResult r = mosaic("sweep " + cfg);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("4 cells run, 0 finished earlier, 0 errors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sgd lr 0.01 ps x2: "), std::string::npos) << r.out;
  const std::string md = read(dir_ / "out" / "table_speedup.md");
  for (const std::string mode : {"allreduce", "ps"})
    EXPECT_NE(md.find("| zoo:fmnist-cnn | onednn | sgd | 0.01 | 8 | " + mode + " | "), std::string::npos) << md;
  const std::string csv = read(dir_ / "out" / "table_speedup.csv");
  EXPECT_NE(csv.find("zoo:fmnist-cnn,onednn,sgd,0.01,8,allreduce,1,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",1,1,done\n"), std::string::npos) << "1 worker: speed-up 1, efficiency 1\n" << csv;
  const auto doc = read_json((dir_ / "out" / "sweep.json").string());
  ASSERT_EQ(doc["cells"].size(), 4u);
  for (const auto& cell : doc["cells"]) {
    EXPECT_EQ(cell["log"]["ranks"], cell["ranks"]) << "workers";
    EXPECT_EQ(cell["log"]["distributed"]["mode"], cell["mode"]);
    EXPECT_EQ(cell["log"]["global_batch"], 8 * cell["ranks"].get<int>());
  }
  r = mosaic("sweep " + cfg);
  EXPECT_NE(r.out.find("0 cells run, 4 finished earlier"), std::string::npos) << r.out;
  r = mosaic("sweep " + write("bad.yaml", "models: zoo:fmnist-cnn\nmode: ring\nranks: 2\n"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key 'mode': unknown data-parallel mode 'ring'"), std::string::npos) << r.out;
  r = mosaic("sweep " + write("bad2.yaml", "models: zoo:fmnist-cnn\nmode: ps\n"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key 'mode' needs key 'ranks'"), std::string::npos) << r.out;
}

// A `backends` entry may be a mixed placement (an --assign spec, or a placement YAML file
// relative to the sweep's): its cells train on it, and follow the naive oracle's losses.
// The speed-up table's cells from given rates: speed-up = rate on n / rate on 1, efficiency
// = speed-up / n; rates under 100 keep three significant digits (BERT-Base trains ~1.3
// sequences/s, which a whole number would print as 1 against 2), token data in seq/s.
TEST_F(Sweep, SpeedupTableKeepsSmallRatesAndNamesTheUnit) {
  using mosaic::api::ScalingCell;
  const std::vector<ScalingCell> cells = {{"zoo:bert-base | onednn | adam | 0.0001 | 35", "allreduce", 1, 1.27, "done"},
                                          {"zoo:bert-base | onednn | adam | 0.0001 | 35", "allreduce", 2, 1.98, "done"},
                                          {"zoo:m | onednn | sgd | 0.01 | 128", "allreduce", 1, 11259.4, "done"},
                                          {"zoo:m | onednn | sgd | 0.01 | 128", "allreduce", 2, 21208.0, "done"}};
  ASSERT_TRUE(mosaic::api::write_speedup_table(dir_.string(), "t", "", {1, 2}, cells, true).is_ok());
  std::string md = read(dir_ / "table_speedup.md");
  EXPECT_NE(md.find("Global sequences/s"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1.27 seq/s, 1.00x (100%) | 1.98 seq/s, 1.56x (78%) |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 11259 seq/s, 1.00x (100%) | 21208 seq/s, 1.88x (94%) |"), std::string::npos) << md;
  ASSERT_TRUE(mosaic::api::write_speedup_table(dir_.string(), "t", "", {1, 2}, cells, false).is_ok());
  md = read(dir_ / "table_speedup.md");
  EXPECT_NE(md.find("Global images/s"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1.27 img/s, 1.00x (100%) | 1.98 img/s, 1.56x (78%) |"), std::string::npos) << md;
}

TEST_F(Sweep, MixedPlacementsAreBackendsEntries) {
  write("gemm_on_im2col.yaml", "default: naive\nops:\n  Gemm: im2col\n");
  const std::string cfg = write("mixed.yaml", R"(name: mixed
output: out
data: synthetic:64,1,28,28,10
models: zoo:fmnist-cnn
backends: [naive, "Conv=onednn,*=naive", gemm_on_im2col.yaml]
batch: 8
epochs: 1
steps_per_epoch: 3
evaluate: false
shuffle: false
threads: 1
)");
  CmdResult r = mosaic("sweep " + cfg);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 cells run, 0 finished earlier, 0 errors"), std::string::npos) << r.out;
  const auto doc = read_json((dir_ / "out" / "sweep.json").string());
  ASSERT_EQ(doc["cells"].size(), 3u);
  const auto& naive = doc["cells"][0]["log"]["steps"];
  ASSERT_EQ(naive.size(), 3u) << doc["cells"][0].dump();
  for (size_t c = 1; c < 3; ++c) {
    const auto& cell = doc["cells"][c];
    EXPECT_EQ(cell["log"]["assign"], cell["backend"]) << cell.dump();
    const auto& steps = cell["log"]["steps"];
    ASSERT_EQ(steps.size(), naive.size()) << cell.dump();
    for (size_t i = 0; i < steps.size(); ++i)
      EXPECT_NEAR(steps[i]["loss"].get<double>(), naive[i]["loss"].get<double>(), 1e-4 * naive[i]["loss"].get<double>())
          << cell["backend"] << " step " << i + 1;
  }
  EXPECT_NE(doc["cells"][2]["backend"].get<std::string>().find("gemm_on_im2col.yaml"), std::string::npos);
  EXPECT_NE(read(dir_ / "out" / "table2.md").find("| Conv=onednn,*=naive |"), std::string::npos);
}

TEST_F(Sweep, ARunThatDoesNotTrainLeavesBlanks) {
  // lr 2 kills fmnist-cnn without a NaN: at chance level after epoch 1, so Table 3 is blank
  // (as the seed's tables are for runs that did not learn); lr 0.1 learns.
  const std::string cfg = write("grid.yaml", R"(name: chance
output: out
data: fashion-mnist
models: zoo:fmnist-cnn
backends: [onednn]
lr: [0.1, 2]
batch: 32
epochs: 1
steps_per_epoch: 60
evaluate: false
)");
  CmdResult r = mosaic("sweep " + cfg);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string t3 = read(dir_ / "out" / "table3.csv"), md = read(dir_ / "out" / "table3.md");
  EXPECT_NE(t3.find("zoo:fmnist-cnn,onednn,32,sgd,2,,does not train\n"), std::string::npos) << t3;
  EXPECT_NE(t3.find("zoo:fmnist-cnn,onednn,32,sgd,0.1,3"), std::string::npos) << t3;  // 30-40% after 60 steps
  EXPECT_NE(md.find("| 2 |  | does not train: after epoch 1, train loss"), std::string::npos) << md;
}

TEST_F(Sweep, TokenModelsTrainAndMaxIsTheLargestBatchThatFits) {
  // Seed 001's BERT table in miniature: token data, the masked-LM objective, and `max`
  // resolved by --find-max-batch's search within the sweep's memory limit.
  const std::string cfg = write("bert.yaml", R"(name: bert
output: out
data: synthetic-tokens:256,128,30521
objective: masked-lm
models: zoo:bert-tiny
backends: [onednn]
optimizers: [adam]
lr: 0.0001
batch: [2, 500, max]
memory_limit: 400M
epochs: 1
steps_per_epoch: 1
evaluate: false
)");
  CmdResult r = mosaic("sweep " + cfg);
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_NE(r.out.find("batch max: the largest training batch of zoo:bert-tiny on onednn with adam"), std::string::npos) << r.out;
  const std::string resolved = "batch max: ";
  long long max = 0;
  for (size_t p = r.out.find(resolved); p != std::string::npos; p = r.out.find(resolved, p + 1))
    if (std::isdigit(static_cast<unsigned char>(r.out[p + resolved.size()]))) max = std::stoll(r.out.substr(p + resolved.size()));
  ASSERT_GT(max, 2) << r.out;  // bert-tiny trains far more than 2 sequences in 400 MB, and far fewer than 500
  ASSERT_LT(max, 500) << r.out;
  const std::string md = read(dir_ / "out" / "table2.md");
  EXPECT_NE(md.find("objective masked-lm"), std::string::npos) << md;
  EXPECT_NE(md.find("sequences per second"), std::string::npos) << md;
  EXPECT_NE(md.find("| batch 2 | batch " + std::to_string(max) + " | batch 500 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("—"), std::string::npos) << "the cells up to max trained: " << md;
  // A listed batch above max would outgrow the memory: recorded, not run.
  EXPECT_NE(md.find("| does not fit |"), std::string::npos) << md;
  EXPECT_NE(r.out.find("batch 500 is above the largest that fits (" + std::to_string(max) + "): not run"), std::string::npos)
      << r.out;
  // Resumed: the max found before (kept in max_batch.json), the same cells.
  r = mosaic("sweep " + cfg);
  EXPECT_NE(r.out.find("batch max: " + std::to_string(max) + " for zoo:bert-tiny on onednn (found earlier"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("0 cells run, 3 finished earlier"), std::string::npos) << r.out;
}

TEST_F(Sweep, MaxWithRanksFitsEveryWorkerOfACell) {
  // A data-parallel cell starts its workers on this machine at once, each with its own batch,
  // data set and communication buffers: `max` is searched within one worker's share of the
  // limit, less what a worker holds besides its plan and a sixth kept back. Two workers within
  // 1600M find what one process finds within that remainder (a search that ignored the ranks
  // found the 1600M batch for each of them: twice the memory, and the kernel's killer; one that
  // split the limit but forgot the data and buffers had two ResNet-50 workers killed).
  const std::string common = R"(data: synthetic-tokens:256,128,30521
objective: masked-lm
models: zoo:bert-tiny
backends: [onednn]
optimizers: [adam]
lr: 0.0001
batch: max
epochs: 1
steps_per_epoch: 1
evaluate: false
threads: 1
)";
  auto found = [](const std::string& out) {
    const std::string resolved = "batch max: ";
    long long max = 0;
    for (size_t p = out.find(resolved); p != std::string::npos; p = out.find(resolved, p + 1))
      if (std::isdigit(static_cast<unsigned char>(out[p + resolved.size()]))) max = std::stoll(out.substr(p + resolved.size()));
    return max;
  };
  CmdResult two = mosaic("sweep " + write("two.yaml", "name: two\noutput: two\nmemory_limit: 1600M\nranks: [2]\n" + common));
  ASSERT_EQ(two.code, 0) << two.out;
  EXPECT_NE(two.out.find("a cell runs up to 2 processes here, so the search's limit is 838.86 MB of 1.68 GB"),
            std::string::npos) << two.out;
  // bert-tiny: 4,367,290 parameters, three copies in float32, and 256 MiB of runtime (token
  // data is made per cell: none held at the search).
  const long long held = 3LL * 4 * 4367290 + (256LL << 20);
  EXPECT_NE(two.out.find("zoo:bert-tiny: each process holds 320.84 MB of data and buffers"), std::string::npos)
      << two.out;
  const long long share = 1600LL * 1048576 / 2;
  const std::string rest = std::to_string(share - share / 6 - held);  // a sixth of the share kept back
  CmdResult one = mosaic("sweep " + write("one.yaml", "name: one\noutput: one\nmemory_limit: " + rest + "\n" + common));
  ASSERT_EQ(one.code, 0) << one.out;
  const long long per_worker = found(two.out), alone = found(one.out);
  ASSERT_GT(alone, 1) << one.out;
  // The searches confirm their batch with real runs whose resident growth sits near the limit
  // here: on a 2-core AMD VM (2026-12-07) each of the two found 3 in some runs and 5 in others,
  // alone and beside other tests. A search that forgot the data and buffers would search
  // within 699 MB, 11 there; one that ignored the ranks, more still.
  EXPECT_LE(std::llabs(per_worker - alone), std::max(2LL, alone / 5)) << two.out << one.out;
}

TEST_F(Sweep, ConfigErrorsNameFileAndKeyAndLeaveNoOutput) {
  struct Case {
    std::string yaml, message;
  };
  const std::vector<Case> cases = {
      {"models: zoo:fmnist-cnn\nbatchsize: 4\n", "unknown key 'batchsize'"},
      {"models: zoo:fmnist-cnn\nepochs: many\n", "key 'epochs' has a value of the wrong type ('many')"},
      {"backends: [naive]\n", "key 'models' is required"},
      {"models: zoo:fmnist-cnn\nbackends: [tpu]\n", "key 'backends': unknown backend 'tpu'"},
      {"models: zoo:fmnist-cnn\nbackends: ['Conv=tpu,*=naive']\n", "key 'backends': "},
      {"models: zoo:fmnist-cnn\nbackends: [nosuch.yaml]\n", "key 'backends': "},
      {"models: zoo:fmnist-cnn\nbackends: ['@nosuchnode=onednn']\n", "has no node named 'nosuchnode'"},
      {"models: zoo:fmnist-cnn\noptimizers: [lamb]\n", "key 'optimizers': unknown optimizer 'lamb'"},
      {"models: nosuch.onnx\n", "nosuch.onnx not found"},
      {"models: zoo:fmnist-cnn\ndata: idx:/nonexistent\n", "key 'data': "},
      // Data a model cannot take, and token data that cannot be made: before any cell (they
      // failed at their cells, with the output folder and empty tables left behind).
      {"models: zoo:fmnist-cnn\ndata: text:/nonexistent.txt\n",
       "key 'data': --data text:/nonexistent.txt gives token ids [batch, T]; zoo:fmnist-cnn's input"},
      {"models: zoo:lstm-classifier\ndata: synthetic:32,1,28,28,10\n",
       "key 'data': zoo:lstm-classifier: input 'input_ids' is int64 [64,64] but the data gives batches of float32"},
      {"models: zoo:lstm-classifier\ndata: synthetic-tokens:32,64,10000\n",
       "key 'data': zoo:lstm-classifier: output 'logits' is [64,4], expected [64,64,10000] logits"},
      {"models: [zoo:lstm-classifier]\ndata: synthetic-classes:32,16,100,4\n",
       "sequences of 16 tokens, but the model's input takes 64"},
      {"models: zoo:fmnist-cnn\nepochs: 2\naccuracy_epochs: [5]\n", "epoch 5 is outside 1..2"},
      {"models: zoo:fmnist-cnn\nepochs: 1000000000000\n", "key 'epochs': 1000000000000 epochs; at most 100000"},
      {"models: [zoo:fmnist-cnn\n", "not valid YAML"},
      // A repeated key (yaml-cpp answers with the first), a repeated axis value (identical cells),
      // non-finite and out-of-range numbers, a grid far beyond what was meant.
      {"models: zoo:fmnist-cnn\nepochs: 1\nepochs: 3\n", "key 'epochs' appears twice (line 4)"},
      {"models: zoo:fmnist-cnn\nlr: [0.1, 0.01, 0.1]\n", "key 'lr' lists the value '0.1' twice (items 1 and 3)"},
      {"models: zoo:fmnist-cnn\nbatch: [8, 8]\n", "key 'batch' lists the value '8' twice"},
      {"models: zoo:fmnist-cnn\nbatch: [8, maxx]\n", "key 'batch': 'maxx' is neither a positive batch size nor max"},
      {"models: zoo:fmnist-cnn\nbatch: 0\n", "key 'batch': '0' is neither"},
      {"models: zoo:fmnist-cnn\nobjective: mlm\n", "key 'objective' must be next-token or masked-lm"},
      {"models: zoo:fmnist-cnn\nmemory_limit: 1G\n", "key 'memory_limit' applies to 'batch: max'"},
      {"models: zoo:fmnist-cnn\nbatch: max\nmemory_limit: lots\n", "key 'memory_limit': "},
      {"models: zoo:fmnist-cnn\nbatch: max\nbackends: ['Conv=onednn,*=naive']\n", "key 'batch': max needs backends named"},
      {"models: zoo:fmnist-cnn\nmomentum: .nan\n", "key 'momentum' must be a finite number, got '.nan'"},
      {"models: zoo:fmnist-cnn\nmomentum: 1.5\n", "key 'momentum' must be in [0, 1)"},
      {"models: zoo:fmnist-cnn\nlr: [.inf]\n", "key 'lr': values must be finite numbers"},
      {"models: zoo:fmnist-cnn\nbatch: [1,2,3,4,5,6,7,8,9,10,11]\nlr: [1,2,3,4,5,6,7,8,9,10]\n"
       "optimizers: [sgd, adam, rmsprop, adagrad, adamw, momentum, nesterov]\nbackends: [naive, im2col]\n"
       "models: zoo:fmnist-cnn\n", "appears twice"},
  };
  for (const auto& c : cases) {
    const std::string cfg = write("bad.yaml", "output: out\n" + c.yaml);
    CmdResult r = mosaic("sweep " + cfg);
    EXPECT_EQ(r.code, 2) << c.yaml << r.out;
    EXPECT_NE(r.out.find(cfg), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.yaml << " -> " << r.out;
    EXPECT_FALSE(fs::exists(dir_ / "out")) << c.yaml;
  }
  {
    // 11 batches x 10 lrs x 7 optimizers x 2 backends = 1540 cells: refused before anything runs.
    const std::string cfg = write("big.yaml", "output: out\nmodels: zoo:fmnist-cnn\nbatch: [1,2,3,4,5,6,7,8,9,10,11]\n"
                                              "lr: [1,2,3,4,5,6,7,8,9,10]\noptimizers: [sgd, adam, rmsprop, adagrad, "
                                              "adamw, momentum, nesterov]\nbackends: [naive, im2col]\n");
    CmdResult big = mosaic("sweep " + cfg);
    EXPECT_EQ(big.code, 2) << big.out;
    EXPECT_NE(big.out.find("the grid has 1540 cells (1 model x 2 backends x 11 batches x 7 optimizers x 10 lrs), "
                           "more than --max-grid 1000"),
              std::string::npos)
        << big.out;
    EXPECT_FALSE(fs::exists(dir_ / "out"));
  }
  CmdResult r = mosaic("sweep " + (dir_ / "missing.yaml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("missing.yaml: not found"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mosaic::test
