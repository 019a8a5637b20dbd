// The machine's limits as errors, not hangs: a thread count the address space cannot hold (OpenBLAS
// retried its buffer's mmap forever, and only SIGKILL ended it), and a second SIGINT/SIGTERM that
// always ends the process, whatever it is doing (issue 50, C3).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "ir/interrupt.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

TEST(Limits, ThreadsTheAddressSpaceCannotHoldAreRefusedNotAHang) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory cannot run under an address-space limit";
#endif
  // 32 threads need about 6 GiB of address space (stacks, malloc arenas, OpenBLAS's buffers);
  // under a 3 GB limit the run is refused at once, naming the flag and the limit. Before, it
  // hung in OpenBLAS (timeout's 120 s, then exit 137 from its SIGKILL).
  CmdResult r = mosaic_shell("(ulimit -v 3000000; timeout -s KILL 120 " + std::string(MOSAIC_BIN) +
                             " bench zoo:fmnist-cnn --backend im2col --batch 1 --iterations 1 --warmup 0 --no-peaks"
                             " --no-db --threads 32 2>&1; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--threads 32: each thread maps about"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the address-space limit (ulimit -v) of 2.9 GiB"), std::string::npos) << r.out;
  // A count that fits still runs under the same limit.
  r = mosaic_shell("(ulimit -v 3000000; " + std::string(MOSAIC_BIN) +
                   " bench zoo:fmnist-cnn --backend im2col --batch 1 --iterations 1 --warmup 0 --no-peaks --no-db"
                   " --threads 2 2>&1; echo rc=$?)");
  EXPECT_NE(r.out.find("rc=0"), std::string::npos) << r.out;
}

// Runs `body` in a child process with the interrupt handlers installed and returns its wait status.
int in_child(bool in_group, void (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    install_interrupt_handlers(in_group);
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Limits, ASecondSignalEndsTheProcessWhateverItIsDoing) {
  // Alone: the first SIGTERM is a request (work that polls stops at its next safe point); the
  // second ends the process with the signal's default action, even in work that never polls.
  int status = in_child(false, [] {
    std::raise(SIGTERM);
    if (!interrupted() || interrupt_exit_code() != 143) _exit(3);  // the first one is a request
    std::raise(SIGTERM);
    _exit(4);  // still alive: the bug
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "wait status " << status;
  status = in_child(false, [] {
    std::raise(SIGINT);
    std::raise(SIGTERM);
    _exit(4);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "wait status " << status;
  // A rank of an mpirun job: further signals only set the flag (mpirun's SIGKILL is its hard stop).
  status = in_child(true, [] {
    std::raise(SIGINT);
    std::raise(SIGTERM);
    _exit(interrupt_exit_code() == 130 ? 5 : 6);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 5) << "wait status " << status;
}

}  // namespace
}  // namespace mosaic::test
