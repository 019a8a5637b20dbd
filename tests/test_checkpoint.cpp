// train --checkpoint / --resume: a run stopped at an epoch end and resumed takes exactly the
// steps the uninterrupted run takes; bad checkpoints and mismatched settings are refused.
#include <gtest/gtest.h>
#include <iterator>
#include <nlohmann/json.hpp>
#include <cstring>

#include <filesystem>
#include <fstream>

#include "tests/test_util.hpp"

namespace mosaic::test {
namespace {

namespace fs = std::filesystem;

class Checkpoints : public ScratchDirTest {
 protected:
  Checkpoints() : ScratchDirTest("mosaic_ckpt_") {}
};

const char* kRun = "train zoo:fmnist-cnn --data synthetic:600,1,28,28,10 --threads 1 --deterministic --seed 4";

TEST_F(Checkpoints, ResumedRunTakesTheUninterruptedRunsSteps) {
  for (const std::string opt : {"--optimizer adam --lr 0.001", "--optimizer sgd --momentum 0.9 --lr 0.01"}) {
    SCOPED_TRACE(opt);
    const std::string run = std::string(kRun) + " --batch 20 " + opt;
    ASSERT_EQ(mosaic(run + " --epochs 3 --json " + path("full.json")).code, 0);
    CmdResult r = mosaic(run + " --epochs 1 --checkpoint " + path("ck") + " --json " + path("first.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    ASSERT_TRUE(fs::exists(path("ck")));
    EXPECT_FALSE(fs::exists(path("ck.tmp")));
    r = mosaic(run + " --epochs 3 --resume " + path("ck") + " --json " + path("resumed.json"));
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("resumed from " + path("ck") + ": 1 epoch(s), 25 steps done"), std::string::npos) << r.out;
    const auto full = read_json(path("full.json")), resumed = read_json(path("resumed.json"));
    ASSERT_EQ(full["steps"].size(), 75u);
    ASSERT_EQ(resumed["steps"].size(), 75u) << "the log continues the checkpoint's";
    for (size_t i = 0; i < 75; ++i)
      ASSERT_EQ(full["steps"][i]["loss"].get<double>(), resumed["steps"][i]["loss"].get<double>()) << "step " << i + 1;
    ASSERT_EQ(resumed["epochs"].size(), 3u);
    for (size_t e = 0; e < 3; ++e)
      EXPECT_EQ(full["epochs"][e]["test_accuracy"], resumed["epochs"][e]["test_accuracy"]) << "epoch " << e + 1;
    EXPECT_EQ(resumed["resumed_from"]["epoch"], 1);
  }
}

TEST_F(Checkpoints, BadCheckpointsAndOtherSettingsAreRefused) {
  ASSERT_EQ(mosaic(std::string(kRun) + " --batch 20 --epochs 1 --checkpoint " + path("ck")).code, 0);
  CmdResult r = mosaic(std::string(kRun) + " --epochs 2 --batch 10 --resume " + path("ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(path("ck") + ": the checkpoint was written with batch 20, this run has 10"), std::string::npos) << r.out;
  r = mosaic(std::string(kRun) + " --batch 20 --epochs 1 --resume " + path("ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("has already trained 1 epoch(s); --epochs 1 leaves nothing to do"), std::string::npos) << r.out;
  std::ofstream(path("text")) << "not a checkpoint";
  r = mosaic(std::string(kRun) + " --batch 20 --epochs 2 --resume " + path("text"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(path("text") + ": not a Mosaic checkpoint"), std::string::npos) << r.out;
  fs::copy_file(path("ck"), path("cut"));
  fs::resize_file(path("cut"), fs::file_size(path("ck")) - 1000);
  r = mosaic(std::string(kRun) + " --batch 20 --epochs 2 --resume " + path("cut"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(path("cut") + ": the checkpoint is truncated"), std::string::npos) << r.out;
  r = mosaic("train zoo:alexnet-cifar --data synthetic:60,3,32,32,10 --batch 20 --threads 1 --deterministic --seed 4 "
             "--epochs 2 --resume " + path("ck"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the checkpoint was written with model \"zoo:fmnist-cnn\""), std::string::npos) << r.out;
  {
    // A header that claims 2^50 floats for a tensor is refused before anything is allocated.
    std::ifstream in(path("ck"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    std::memcpy(&n, bytes.data() + 8, 8);
    nlohmann::json header = nlohmann::json::parse(bytes.substr(16, n));
    header["tensors"][0]["floats"] = uint64_t{1} << 50;
    const std::string text = header.dump();
    const uint64_t m = text.size();
    std::ofstream out(path("huge"), std::ios::binary);
    out.write(bytes.data(), 8);
    out.write(reinterpret_cast<const char*>(&m), 8);
    out << text << bytes.substr(16 + n);
  }
  r = mosaic(std::string(kRun) + " --batch 20 --epochs 2 --resume " + path("huge"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(path("huge") + ": the checkpoint is truncated (tensor"), std::string::npos) << r.out;
  r = mosaic(std::string(kRun) + " --batch 20 --epochs 2 --resume " + path("missing"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(path("missing") + ": cannot open the checkpoint"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mosaic::test
