// Progress lines: the text, shown on a terminal (through script(1)'s pseudo-terminal) and
// never in a pipe or with MOSAIC_PROGRESS=0.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "metrics/progress.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

TEST(Progress, FormatHandComputed) {
  EXPECT_EQ(Progress::format(30, 120, 12), "30/120 (25%)  12s elapsed, ETA 36s");
  EXPECT_EQ(Progress::format(1, 3, 100), "1/3 (33%)  1m40s elapsed, ETA 3m20s");
  EXPECT_EQ(Progress::format(0, 9, 2), "0/9  2s elapsed");          // nothing done: no ETA yet
  EXPECT_EQ(Progress::format(7, 0, 4000), "7  1h07m elapsed");     // unknown total (adaptive)
}

/// Runs mosaic ARGS under a pseudo-terminal; stdout and stderr together.
CmdResult on_terminal(const std::string& args, const std::string& env = "") {
  return mosaic_shell("script -qec \"" + env + " " + std::string(MOSAIC_BIN) + " " + args + "\" /dev/null");
}

TEST(Progress, ShownOnATerminalOnly) {
  const std::string bench = "bench zoo:fmnist-cnn --batch 2 --backends naive --warmup 2 --iterations 20";
  CmdResult tty = on_terminal(bench);
  ASSERT_EQ(tty.code, 0) << tty.out;
  EXPECT_NE(tty.out.find("benchmarking naive: "), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("ETA"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos);  // redrawn in place, then erased
  CmdResult pipe = mosaic(bench);
  ASSERT_EQ(pipe.code, 0) << pipe.out;
  EXPECT_EQ(pipe.out.find("ETA"), std::string::npos) << pipe.out;
  EXPECT_EQ(pipe.out.find('\r'), std::string::npos);
  CmdResult off = on_terminal(bench, "MOSAIC_PROGRESS=0");
  ASSERT_EQ(off.code, 0) << off.out;
  EXPECT_EQ(off.out.find("ETA"), std::string::npos) << off.out;
}

TEST(Progress, TheTimeBudgetCapsTheTotalAndTheEta) {
  // 10^6 iterations asked, 2 s of budget: the line shows what the budget leaves room for.
  CmdResult tty = on_terminal("bench zoo:fmnist-cnn --batch 2 --backends naive --warmup 1 --iterations 1000000 "
                              "--max-seconds 2 --no-peaks --no-db");
  ASSERT_EQ(tty.code, 0) << tty.out;
  EXPECT_NE(tty.out.find("until the time budget"), std::string::npos) << tty.out;
  EXPECT_EQ(tty.out.find("/1000000 "), std::string::npos) << "no total of a million iterations: " << tty.out.substr(0, 2000);
}

TEST(Progress, SweepsShowTheRunningCellsEpochAndStep) {
  const auto dir = std::filesystem::temp_directory_path() / ("mosaic_progress_sweep_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "s.yaml") << "name: p\noutput: out\ndata: synthetic:48,1,28,28,10\nmodels: zoo:fmnist-cnn\n"
                                   "backends: [onednn]\nlr: [0.01, 0.02]\nbatch: 8\nepochs: 1\nsteps_per_epoch: 2\n";
  CmdResult tty = on_terminal("sweep " + (dir / "s.yaml").string() + " --no-db");
  ASSERT_EQ(tty.code, 0) << tty.out;
  // The running cell's epoch and step, not a count of cells that sits still for a whole cell.
  EXPECT_NE(tty.out.find("sweep p: cell 2/2, epoch 1/1: 1/2 (50%)"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("[2/2] zoo:fmnist-cnn onednn batch 8 sgd lr 0.02 ..."), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("time: "), std::string::npos) << "an estimate after the first cell: " << tty.out;
  EXPECT_NE(tty.out.find("sweep p: 2 cells (1 model x 1 backend x 1 batch x 1 optimizer x 2 lrs)"), std::string::npos)
      << tty.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mosaic::test
