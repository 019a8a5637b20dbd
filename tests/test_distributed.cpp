// Data-parallel training over MPI: equivalence with one process at the global batch on every
// backend, the ring's traffic against its closed form, shards, and the failure paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "backends/registry.hpp"
#include "distributed/ring_allreduce.hpp"
#include "distributed/shm_allreduce.hpp"
#include "frontends/data/dataset.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "tests/test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

class Distributed : public ScratchDirTest {
 protected:
  Distributed() : ScratchDirTest("mosaic_dist_") {}
  void SetUp() override {
    allow_mpirun();
    ScratchDirTest::SetUp();
  }
  static CmdResult mpirun(int ranks, const std::string& args) {
    return mosaic_shell("timeout 300 mpirun -np " + std::to_string(ranks) + " --oversubscribe --bind-to none " +
                        std::string(MOSAIC_BIN) + " " + args);
  }
  // `run` (without --epochs) for 2 epochs straight, then for 1 epoch with --checkpoint
  // path("ck") and resumed from it for the second: the straight and the resumed train
  // JSONs. Null documents when a run failed (the failure is recorded; check HasFailure()).
  std::pair<nlohmann::json, nlohmann::json> straight_and_resumed(int ranks, const std::string& run) {
    const std::string ck = "ck";
    CmdResult r = mpirun(ranks, run + " --epochs 2 --json " + path("full.json"));
    EXPECT_EQ(r.code, 0) << r.out;
    if (r.code == 0) r = mpirun(ranks, run + " --epochs 1 --checkpoint " + path(ck));
    EXPECT_EQ(r.code, 0) << r.out;
    if (r.code == 0) r = mpirun(ranks, run + " --epochs 2 --resume " + path(ck) + " --json " + path("resumed.json"));
    EXPECT_EQ(r.code, 0) << r.out;
    if (r.code != 0) return {};
    return {read_json(path("full.json")), read_json(path("resumed.json"))};
  }
};

// Relative difference of the per-step losses of two train JSONs (all steps, same count).
double loss_difference(const nlohmann::json& a, const nlohmann::json& b) {
  EXPECT_EQ(a["steps"].size(), b["steps"].size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a["steps"].size(), b["steps"].size()); ++i) {
    const double x = a["steps"][i]["loss"].get<double>(), y = b["steps"][i]["loss"].get<double>();
    worst = std::max(worst, std::abs(x - y) / std::max(std::abs(x), 1e-12));
  }
  return worst;
}

// Largest relative difference over every parameter of two saved models.
double parameter_difference(const std::string& a, const std::string& b) {
  auto ga = load_onnx(a), gb = load_onnx(b);
  EXPECT_TRUE(ga.ok() && gb.ok());
  if (!ga.ok() || !gb.ok()) return 1e9;
  double worst = 0;
  for (const auto& [name, t] : ga->initializers) {
    if (t.dtype() != DType::kF32) continue;
    const Tensor& u = gb->initializers.at(name);
    double scale = 1e-6;
    for (int64_t i = 0; i < t.numel(); ++i) scale = std::max(scale, static_cast<double>(std::abs(t.f32()[i])));
    for (int64_t i = 0; i < t.numel(); ++i)
      worst = std::max(worst, std::abs(static_cast<double>(t.f32()[i]) - u.f32()[i]) / scale);
  }
  return worst;
}

// N ranks at batch b take the same steps as one process at batch N·b: 20 steps, every
// backend, SGD (file order) and Adam (shuffled: the ranks share one permutation per epoch).
// The registry's backends without the bundled plugins' (whose process loads them only where a
// filter names them), so that the test is the same whichever filter runs it.
TEST_F(Distributed, AllreduceEqualsOneProcessAtTheGlobalBatch) {
  for (const std::string& backend : cli_registered_backends()) {
    for (const std::string optimizer : {"sgd", "adam"}) {
      SCOPED_TRACE(backend + " " + optimizer);
      const std::string common = "train zoo:fmnist-cnn --backend " + backend + " --optimizer " + optimizer +
                                 " --lr " + (optimizer == "sgd" ? "0.05" : "0.001") +
                                 " --steps 20 --no-eval --threads 1 --seed 3" +
                                 (optimizer == "sgd" ? " --no-shuffle" : "");
      CmdResult one = mosaic(common + " --batch 16 --json " + path("one.json") + " --save " + path("one.onnx"));
      ASSERT_EQ(one.code, 0) << one.out;
      const auto a = read_json(path("one.json"));
      for (const std::string collective : {"shm", "ring"}) {
        SCOPED_TRACE(collective);
        CmdResult two = mpirun(2, common + " --batch 8 --distributed allreduce --collective " + collective + " --json " +
                                      path("two.json") + " --save " + path("two.onnx"));
        ASSERT_EQ(two.code, 0) << two.out;
        const auto b = read_json(path("two.json"));
        EXPECT_EQ(b["distributed"]["collective"], collective);
        EXPECT_EQ(b["ranks"], 2);
        EXPECT_EQ(b["batch"], 8);
        EXPECT_EQ(b["global_batch"], 16);
        EXPECT_LT(loss_difference(a, b), 1e-5);
        const double params = parameter_difference(path("one.onnx"), path("two.onnx"));
        std::printf("%s %s %s: losses within %.2g, parameters within %.2g (relative to each tensor's largest)\n",
                    backend.c_str(), optimizer.c_str(), collective.c_str(), loss_difference(a, b), params);
        // Adam moves every parameter by about lr in the direction of m/sqrt(v): where a gradient
        // is near zero, rounding in its last bits (the sums run in another order) changes the
        // step by up to lr, so its parameters agree less tightly than SGD's.
        EXPECT_LT(params, optimizer == "sgd" ? 1e-4 : 1e-3);
        EXPECT_TRUE(b["distributed"]["parameters_identical"].get<bool>());
        EXPECT_NE(two.out.find("2 ranks x batch 8 = global batch 16"), std::string::npos) << two.out;
        for (const auto& r : b["distributed"]["per_rank"]) EXPECT_EQ(r["bytes_sent"], r["bytes_sent_expected"]) << r.dump();
      }
      // Synchronous parameter server: 2 workers and 1 server take the same steps.
      CmdResult ps = mpirun(3, common + " --batch 8 --distributed ps --json " + path("ps.json") + " --save " + path("ps.onnx"));
      ASSERT_EQ(ps.code, 0) << ps.out;
      const auto c = read_json(path("ps.json"));
      EXPECT_EQ(c["global_batch"], 16);
      EXPECT_LT(loss_difference(a, c), 1e-5);
      const double ps_params = parameter_difference(path("one.onnx"), path("ps.onnx"));
      std::printf("%s %s ps: losses within %.2g, parameters within %.2g\n", backend.c_str(), optimizer.c_str(),
                  loss_difference(a, c), ps_params);
      EXPECT_LT(ps_params, optimizer == "sgd" ? 1e-4 : 1e-3);
      EXPECT_TRUE(c["distributed"]["parameters_identical"].get<bool>());
      // Push + pull per worker: the parameter bytes each way per step; the server: 2x that.
      const double per_step = c["distributed"]["parameter_bytes"].get<double>();
      for (const auto& r : c["distributed"]["per_rank"]) {
        EXPECT_EQ(r["bytes_sent"], r["bytes_sent_expected"]) << r.dump();
        EXPECT_EQ(r["bytes_received"], r["bytes_received_expected"]) << r.dump();
        EXPECT_EQ(r["bytes_sent"].get<double>(), 20 * per_step * (r["role"] == "server" ? 2 : 1)) << r.dump();
      }
      EXPECT_EQ(c["distributed"]["staleness"][0], 40) << "every gradient applied at once (2 workers x 20 steps)";
    }
  }
}

// Asynchronous parameter servers (2 workers, 2 servers): every gradient is applied, its
// staleness recorded, and the model learns.
TEST_F(Distributed, AsyncParameterServersApplyEveryGradientAndLearn) {
  CmdResult r = mpirun(4, "train zoo:fmnist-cnn --backend onednn --steps 150 --batch 16 --threads 1 --lr 0.05 "
                          "--distributed ps-async --servers 2 --json " + path("async.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = read_json(path("async.json"));
  const auto& d = j["distributed"];
  EXPECT_EQ(d["workers"], 2);
  EXPECT_EQ(d["servers"], 2);
  int64_t applied = 0;
  for (const auto& n : d["staleness"]) applied += n.get<int64_t>();
  EXPECT_EQ(applied, 2 * 2 * 150) << "each of 2 servers applies each worker's 150 pushes";
  EXPECT_LT(d["staleness"][0].get<int64_t>(), applied) << "async: some gradients are stale";
  int shards = 0;
  for (const auto& rank : d["per_rank"]) {
    EXPECT_EQ(rank["bytes_sent"], rank["bytes_sent_expected"]) << rank.dump();
    if (rank["role"] != "server") continue;
    ++shards;
    EXPECT_EQ(rank["updates"], 300);
  }
  EXPECT_EQ(shards, 2);
  EXPECT_GT(j["epochs"][0]["test_accuracy"].get<double>(), 0.5) << r.out;  // chance is 0.1
  EXPECT_NE(r.out.find("staleness of applied gradients"), std::string::npos) << r.out;
}

// Three ranks (chunks of unequal length), many small buckets, both collectives: each rank
// sends and receives exactly its closed form, the blocking variant computes the same sums,
// and the two collectives (which add in different orders) take the same steps to rounding.
TEST_F(Distributed, TrafficMatchesTheClosedFormAndBlockingGivesTheSameSteps) {
  const std::string common = "train zoo:fmnist-cnn --backend onednn --steps 6 --batch 4 --no-eval --threads 1 --bucket-mb 0.2";
  std::map<std::string, nlohmann::json> runs;
  for (const std::string collective : {"ring", "shm"}) {
    SCOPED_TRACE(collective);
    CmdResult r = mpirun(3, common + " --distributed allreduce --collective " + collective + " --json " + path("overlap.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    CmdResult b = mpirun(3, common + " --distributed allreduce-blocking --collective " + collective + " --json " +
                                path("blocking.json"));
    ASSERT_EQ(b.code, 0) << b.out;
    const auto o = read_json(path("overlap.json")), k = read_json(path("blocking.json"));
    runs[collective] = o;
    const auto& d = o["distributed"];
    EXPECT_EQ(d["ranks"], 3);
    EXPECT_EQ(d["collective"], collective);
    EXPECT_GT(d["buckets"].size(), 2u);
    int64_t bucket_sum = 0;
    for (const auto& x : d["buckets"]) bucket_sum += x.get<int64_t>();
    EXPECT_EQ(bucket_sum, d["gradient_bytes"].get<int64_t>());
    double all_ranks = 0;
    for (const auto& rank : d["per_rank"]) {
      EXPECT_EQ(rank["bytes_sent"], rank["bytes_sent_expected"]) << rank.dump();
      EXPECT_EQ(rank["bytes_received"], rank["bytes_received_expected"]) << rank.dump();
      all_ranks += rank["bytes_sent"].get<double>() / 6;
      if (collective == "ring") {
        // Per bucket of n floats: 2 (N-1)/N n floats, to the float (chunks differ by one).
        double expected = 0;
        for (const auto& x : d["buckets"]) expected += 2.0 * 2.0 / 3.0 * x.get<double>();
        EXPECT_NEAR(rank["bytes_sent"].get<double>() / 6, expected, 8.0 * d["buckets"].size()) << rank.dump();
      } else {
        EXPECT_GE(rank["comm_wait_s"].get<double>(), 0.0);
        EXPECT_LE(rank["comm_wait_s"].get<double>(), rank["comm_exposed_s"].get<double>());
      }
    }
    // shm: each rank writes its share of every bucket into the N-1 other copies, so the ranks
    // together move (N-1) buckets (each tensor padded to a cache line: 64 bytes at most).
    if (collective == "shm") {
      EXPECT_NEAR(all_ranks, 2.0 * bucket_sum, 2.0 * 64 * 16) << d.dump();
    }
    EXPECT_EQ(loss_difference(o, k), 0.0) << "the same sums, started later";
    EXPECT_TRUE(o["distributed"]["parameters_identical"].get<bool>());
    EXPECT_TRUE(k["distributed"]["parameters_identical"].get<bool>());
    EXPECT_DOUBLE_EQ(k["distributed"]["comm_hidden_share"].get<double>(), 0.0) << "blocking hides nothing";
  }
  EXPECT_LT(loss_difference(runs["ring"], runs["shm"]), 1e-6) << "the ring and rank-order sums differ in rounding only";
}

// Model averaging after every step of plain SGD is the all-reduce step: the mean of
// p - lr g_r is p - lr mean(g_r). With k > 1 the ranks drift between averagings, and each
// averaging moves exactly the ring's closed form of the parameter bytes.
TEST_F(Distributed, ModelAveragingEveryStepIsAllreduceAndCountsItsSyncs) {
  const std::string common = "train zoo:fmnist-cnn --backend onednn --steps 12 --batch 8 --no-eval --threads 1 --lr 0.05 --no-shuffle";
  ASSERT_EQ(mpirun(2, common + " --distributed allreduce --json " + path("ar.json")).code, 0);
  CmdResult r = mpirun(2, common + " --distributed avg --sync-every 1 --json " + path("avg1.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_LT(loss_difference(read_json(path("ar.json")), read_json(path("avg1.json"))), 1e-5);
  r = mpirun(2, common + " --distributed avg --sync-every 5 --json " + path("avg5.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("averaged 3 times (every 5 steps and at epoch ends)"), std::string::npos) << r.out;
  const auto d = read_json(path("avg5.json"))["distributed"];
  EXPECT_EQ(d["syncs"], 3);  // after steps 5 and 10, and at the end of the (cut) epoch, step 12
  EXPECT_TRUE(d["parameters_identical"].get<bool>());
  for (const auto& rank : d["per_rank"]) {
    EXPECT_EQ(rank["bytes_sent"], rank["bytes_sent_expected"]) << rank.dump();
    EXPECT_EQ(rank["bytes_sent"].get<double>(), 3 * d["parameter_bytes"].get<double>()) << "2 ranks: 2 (N-1)/N = 1";
  }
  EXPECT_GT(loss_difference(read_json(path("ar.json")), read_json(path("avg5.json"))), 1e-6) << "local steps differ";
}

// A data-parallel run stopped at an epoch end and resumed (every rank reads the checkpoint)
// takes the uninterrupted run's steps.
TEST_F(Distributed, ResumedAllreduceRunTakesTheUninterruptedRunsSteps) {
  const std::string run = "train zoo:fmnist-cnn --data synthetic:400,1,28,28,10 --batch 8 --threads 1 --optimizer adam "
                          "--lr 0.001 --steps-per-epoch 6 --distributed allreduce";
  const auto [full, resumed] = straight_and_resumed(2, run);
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(loss_difference(full, resumed), 0.0);
  EXPECT_EQ(full["distributed"]["first_epoch_s"], full["epochs"][0]["seconds"]);
  EXPECT_EQ(full["distributed"]["second_epoch_s"], full["epochs"][1]["seconds"]);
  EXPECT_NE(mpirun(2, run + " --epochs 2 --resume " + path("ck") + " --batch 4").code, 0);
}

// The parameter servers hold the model and the optimizer state: worker 0 gathers them for the
// checkpoint, and on resume each server takes its shard's state back. Synchronous: the
// resumed run's steps are the uninterrupted run's, bitwise, with two servers sharing the
// parameters. Asynchronous: the resumed run carries on from the checkpoint's step count.
TEST_F(Distributed, ResumedParameterServerRunTakesTheUninterruptedRunsSteps) {
  const std::string run = "train zoo:fmnist-cnn --data synthetic:400,1,28,28,10 --batch 8 --threads 1 --optimizer adam "
                          "--lr 0.001 --steps-per-epoch 6 --servers 2 --distributed ";
  const auto [full, resumed] = straight_and_resumed(4, run + "ps");
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(loss_difference(full, resumed), 0.0);  // fails without the servers' Adam state
  EXPECT_EQ(resumed["steps"].size(), 12u);
  CmdResult r = mpirun(4, run + "ps-async --epochs 1 --checkpoint " + path("async.ck"));
  ASSERT_EQ(r.code, 0) << r.out;
  r = mpirun(4, run + "ps-async --epochs 2 --resume " + path("async.ck") + " --json " + path("async.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto async = read_json(path("async.json"));
  EXPECT_EQ(async["resumed_from"]["epoch"], 1);
  EXPECT_EQ(async["steps"].size(), 12u);
  for (const auto& s : async["steps"]) EXPECT_TRUE(std::isfinite(s["loss"].get<double>()));
}

// `mpirun -np 2 mosaic bench --mode training --distributed allreduce`: every backend's timed
// steps average their gradients (ranks stay identical, traffic is the ring's closed form);
// rank 0 reports the global throughput. What would let ranks run different iteration
// counts is refused.
TEST_F(Distributed, BenchTrainingStepsUnderMpirun) {
  std::string backends;
  for (const auto& b : builtin_registry().available_backends()) backends += (backends.empty() ? "" : ",") + b;
  CmdResult r = mpirun(2, "bench zoo:fmnist-cnn --mode training --backends " + backends +
                              " --batch 8 --iterations 4 --warmup 1 --threads 1 --distributed allreduce --json " + path("b.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = read_json(path("b.json"));
  ASSERT_EQ(j["distributed"].size(), builtin_registry().available_backends().size()) << j["distributed"].dump();
  for (const auto& [label, d] : j["distributed"].items()) {
    SCOPED_TRACE(label);
    EXPECT_EQ(d["global_batch"], 16);
    EXPECT_TRUE(d["parameters_identical"].get<bool>());
    EXPECT_GT(d["global_images_per_s"].get<double>(), 0);
    for (const auto& rank : d["per_rank"]) {
      EXPECT_GT(rank["bytes_sent"].get<double>(), 0);
      EXPECT_EQ(rank["bytes_sent"], rank["bytes_sent_expected"]) << rank.dump();
    }
    EXPECT_NE(r.out.find(label + ": data-parallel allreduce, 2 ranks x batch 8"), std::string::npos) << r.out;
  }
  r = mosaic("bench zoo:fmnist-cnn --mode training --distributed ps");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--distributed takes allreduce or allreduce-blocking in bench, got 'ps'"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --distributed allreduce");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--distributed needs --mode training"), std::string::npos) << r.out;
  r = mosaic("bench zoo:fmnist-cnn --mode training --distributed allreduce --target-ci 2");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("it excludes --target-ci"), std::string::npos) << r.out;
}

// Bounded staleness: with --max-staleness 0 no worker runs ahead of the slowest, so of 3
// workers' gradients none can be staler than the 2 others' updates of the same round.
TEST_F(Distributed, BoundedStalenessHoldsTheBound) {
  CmdResult r = mpirun(4, "train zoo:fmnist-cnn --steps 60 --batch 8 --threads 1 --no-eval --distributed ps-async "
                          "--max-staleness 0 --json " + path("s.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto d = read_json(path("s.json"))["distributed"];
  EXPECT_EQ(d["max_staleness"], 0);
  int64_t applied = 0;
  for (size_t i = 0; i < d["staleness"].size(); ++i) {
    applied += d["staleness"][i].get<int64_t>();
    if (i > 2) {
      EXPECT_EQ(d["staleness"][i], 0) << "staleness " << i << ": " << d["staleness"].dump();
    }
  }
  EXPECT_EQ(applied, 3 * 60);
  r = mosaic("train zoo:fmnist-cnn --steps 2 --distributed ps --max-staleness 1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--max-staleness bounds the asynchronous parameter server: it needs --distributed ps-async"),
            std::string::npos) << r.out;
}

// --data-repeat R: the training set R times over (the data-parallel benchmark's dataset
// sizes): R times the steps per epoch, over the same images.
TEST_F(Distributed, DataRepeatMultipliesTheEpoch) {
  CmdResult r = mosaic("train zoo:fmnist-cnn --data synthetic:120,1,28,28,10 --batch 10 --data-repeat 3 --no-eval "
                       "--threads 1 --no-shuffle --json " + path("r.json"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = read_json(path("r.json"));
  EXPECT_EQ(j["data_repeat"], 3);
  EXPECT_EQ(j["steps"].size(), 30u) << "100 training images (20 held out) x 3 / batch 10";
  EXPECT_NE(r.out.find("30 batches per epoch"), std::string::npos) << r.out;
  r = mosaic("train zoo:fmnist-cnn --data synthetic:120,1,28,28,10 --data-repeat 0");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--data-repeat"), std::string::npos) << r.out;
}

TEST(RingAllreduce, ClosedFormBytes) {
  // 10 floats over 3 ranks: chunks 4, 3, 3. Rank 0 sends chunks 0, 2 (reduce) and 1, 0 (gather).
  EXPECT_EQ(dist::RingAllreduce::expected_bytes(10, 3, 0), (4 + 3 + 3 + 4) * 4);
  EXPECT_EQ(dist::RingAllreduce::expected_bytes(10, 3, 1), (3 + 4 + 3 + 3) * 4);
  EXPECT_EQ(dist::RingAllreduce::expected_bytes(12, 4, 2), 2 * 3 * 3 * 4);
  EXPECT_EQ(dist::RingAllreduce::expected_bytes(12, 1, 0), 0);
}

TEST(ShmAllreduce, ClosedFormBytes) {
  // 100 floats over 3 ranks, cut on 16-float lines near 33 and 66: shares 32, 32, 36. Each
  // rank reads its share from, and writes it into, the 2 other copies.
  EXPECT_EQ(dist::ShmAllreduce::expected_bytes(100, 3, 0), 2 * 32 * 4);
  EXPECT_EQ(dist::ShmAllreduce::expected_bytes(100, 3, 1), 2 * 32 * 4);
  EXPECT_EQ(dist::ShmAllreduce::expected_bytes(100, 3, 2), 2 * 36 * 4);
  EXPECT_EQ(dist::ShmAllreduce::expected_bytes(10, 2, 0), 0) << "a bucket under a line is one rank's";
  EXPECT_EQ(dist::ShmAllreduce::expected_bytes(10, 2, 1), 10 * 4);
  EXPECT_EQ(dist::ShmAllreduce::expected_bytes(100, 1, 0), 0);
}

// The shards of N ranks at batch b are exactly the single process's batches at N·b, in rank
// order, with and without shuffling.
TEST(DataShards, RanksSplitTheGlobalBatchInRankOrder) {
  auto d = load_data("synthetic:120,1,2,2,3", 5);
  ASSERT_TRUE(d.ok());
  for (bool shuffle : {false, true}) {
    BatchIterator whole(d->train, 12, shuffle, 4);
    whole.start_epoch();
    std::vector<BatchIterator> ranks;
    for (int r = 0; r < 3; ++r) ranks.emplace_back(d->train, 4, shuffle, 4);
    for (int r = 0; r < 3; ++r) ranks[r].set_shard(r, 3), ranks[r].start_epoch();
    EXPECT_EQ(ranks[0].batches_per_epoch(), whole.batches_per_epoch());
    Tensor wi = Tensor::empty({DType::kF32, {12, 1, 2, 2}}), wl = Tensor::empty({DType::kI64, {12}});
    Tensor ri = Tensor::empty({DType::kF32, {4, 1, 2, 2}}), rl = Tensor::empty({DType::kI64, {4}});
    for (int64_t b = 0; b < whole.batches_per_epoch(); ++b) {
      whole.fill(b, wi, wl);
      for (int r = 0; r < 3; ++r) {
        ranks[r].fill(b, ri, rl);
        for (int64_t i = 0; i < 16; ++i) ASSERT_EQ(ri.f32()[i], wi.f32()[r * 16 + i]) << "batch " << b << " rank " << r;
        for (int64_t i = 0; i < 4; ++i) ASSERT_EQ(rl.i64()[i], wl.i64()[r * 4 + i]);
      }
    }
  }
}

TEST_F(Distributed, RanksStartedWithOtherSettingsAreNamed) {
  const std::string base = std::string(MOSAIC_BIN) + " train zoo:fmnist-cnn --steps 2 --no-eval --threads 1 --distributed allreduce";
  CmdResult r = mosaic_shell("timeout 120 mpirun --oversubscribe --bind-to none -np 1 " + base + " --lr 0.1 : -np 1 " + base +
                             " --lr 0.2");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rank(s) 1 of 2 were started with other settings than rank 0"), std::string::npos) << r.out;
}

TEST_F(Distributed, BadModeIsRefusedBeforeAnyWork) {
  const std::string train = "train zoo:fmnist-cnn --steps 2 --distributed ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {train + "ring", "unknown --distributed mode 'ring' (known: allreduce, allreduce-blocking, avg"},
      {train + "allreduce --bucket-mb 0", "--bucket-mb: must be > 0, got 0"},
      {train + "ps", "--distributed ps with --servers 1 needs at least 2 ranks (mpirun -np), got 1"},
      {train + "avg --sync-every 0", "--sync-every: must be a positive integer, got 0"},
      {train + "allreduce --collective tree", "unknown --collective 'tree' (known: auto, ring, shm)"},
      {train + "avg --collective shm", "--collective chooses how the all-reduce modes sum gradients"},
      {"bench zoo:fmnist-cnn --mode training --distributed allreduce --collective tree", "unknown --collective 'tree'"},
  };
  for (const auto& [command, message] : cases) {
    CmdResult r = mosaic(command);
    EXPECT_EQ(r.code, 2) << command << "\n" << r.out;
    EXPECT_NE(r.out.find(message), std::string::npos) << command << "\n" << r.out;
  }
}

// A rank that dies mid-run ends the job within a bounded time, and the launcher names it.
TEST_F(Distributed, AKilledRankEndsTheJob) {
  const std::string marker = path("killed.json");
  const std::string cmd = "timeout 120 mpirun -np 2 --oversubscribe --bind-to none " + std::string(MOSAIC_BIN) +
                          " train zoo:fmnist-cnn --backend naive --epochs 50 --no-eval --threads 1 --json " + marker +
                          " > " + path("out.txt") + " 2>&1 & job=$!; "
                          "for i in $(seq 100); do sleep 0.2; p=; "
                          "for q in $(pgrep -f -- '" + marker + "'); do [ \"$(ps -o comm= -p $q)\" = mosaic ] && p=$q; done; "
                          "[ -n \"$p\" ] && sleep 1 && kill -9 $p && break; done; wait $job; echo exit=$?";
  const auto t0 = std::chrono::steady_clock::now();
  CmdResult r = mosaic_shell(cmd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::ifstream f(path("out.txt"));
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(r.out.find("exit=0"), std::string::npos) << r.out << out;
  EXPECT_EQ(r.out.find("exit=124"), std::string::npos) << "timed out: the job hung\n" << out;
  EXPECT_LT(secs, 100) << out;
  EXPECT_NE(out.find("rank"), std::string::npos) << out;
  EXPECT_NE(out.find("signal 9"), std::string::npos) << out;
}

// Ctrl-C on an mpirun job: mpirun sends every rank SIGTERM and SIGKILL a second later. The
// ranks agree on the step to stop at (a sum with the step's losses, or after an iteration in
// bench), so none is left in a collective: rank 0 writes and records the finished epochs, marked
// interrupted, within that second. Every mode: all-reduce, parameter servers (sync and async),
// model averaging; and bench --distributed.
TEST_F(Distributed, InterruptStopsEveryRankAtTheSameStep) {
  auto interrupt = [&](int ranks, const std::string& args, const std::string& out, const std::string& wait_for) {
    // No `timeout` around mpirun: it would pass the Ctrl-C on as a second SIGINT, on which
    // mpirun exits at once and leaves the ranks running. The wait is bounded here instead.
    // This test's ranks: processes named mosaic whose arguments hold the scratch folder.
    const std::string mine = "ps -eo pid=,comm=,args= | awk '$2 == \"mosaic\" && index($0, \"" + path("") + "\") {print $1}'";
    return mosaic_shell("(setsid mpirun -np " + std::to_string(ranks) + " --oversubscribe --bind-to none " +
                        std::string(MOSAIC_BIN) + " " + args + " > " + path(out) + " 2>&1 & pid=$!; "
                        "for i in $(seq 600); do grep -q '" + wait_for + "' " + path(out) + " && break; sleep 0.1; done; "
                        "kill -INT -$pid; (sleep 30; kill -KILL -$pid) >/dev/null 2>&1 & w=$!; t0=$(date +%s); "
                        "wait $pid; test $(( $(date +%s) - t0 )) -ge 29 && echo MPIRUN-LEFT; kill $w 2>/dev/null; sleep 0.5; "
                        "left=$(" + mine + "); test -n \"$left\" && echo RANK-LEFT && kill -KILL $left; true)");
  };
  const std::string train = "train zoo:fmnist-cnn --data synthetic:256,1,28,28,10 --batch 16 --epochs 100000 --no-eval "
                            "--threads 1 --db " + path("runs.sqlite") + " --distributed ";
  for (const auto& [mode, ranks] : std::vector<std::pair<std::string, int>>{{"allreduce", 2}, {"ps", 3}, {"ps-async", 3}, {"avg", 2}}) {
    SCOPED_TRACE(mode);
    const std::string json = path(mode + ".json");
    CmdResult r = interrupt(ranks, train + mode + " --json " + json, mode + ".out", "^epoch 2:");
    EXPECT_EQ(r.out.find("RANK-LEFT"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("MPIRUN-LEFT"), std::string::npos) << r.out;
    const nlohmann::json doc = read_json(json);
    ASSERT_TRUE(doc.is_object()) << read_all(path(mode + ".out"));
    EXPECT_EQ(doc.value("interrupted", false), true) << read_all(path(mode + ".out"));
    EXPECT_FALSE(doc.contains("written_after_epoch")) << "rank 0 wrote the final report before mpirun's SIGKILL";
    EXPECT_GE(doc["epochs"].size(), 2u);
    EXPECT_TRUE(doc["distributed"]["parameters_identical"].get<bool>() || mode == "ps-async") << doc["distributed"];
  }
  EXPECT_NE(mosaic("history --db " + path("runs.sqlite")).out.find("zoo:fmnist-cnn"), std::string::npos);
  const std::string json = path("bench.json");
  CmdResult r = interrupt(2, "bench zoo:fmnist-cnn --mode training --backends onednn,im2col --distributed allreduce --batch 8 "
                          "--iterations 1000000 --warmup 1 --no-peaks --no-db --threads 1 --json " + json,
                          "bench.out", "benchmarking onednn");
  const nlohmann::json doc = read_json(json);
  ASSERT_TRUE(doc.is_object()) << r.out << read_all(path("bench.out"));
  EXPECT_EQ(doc.value("interrupted", false), true);
  EXPECT_EQ(doc["runs"].size(), 1u) << "onednn, up to the signal; im2col did not run";
}

}  // namespace
}  // namespace mosaic::test
