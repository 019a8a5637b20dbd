// Ctrl-C and SIGTERM as a request, not a kill: long work (timing loops, training steps) polls
// interrupted() and stops at the next safe point, so that what finished is still written and
// recorded (marked "interrupted": true) before the program exits 130 or 143.
//
// The handler never runs on a thread that computes. A signal handler's frame is written below
// the interrupted thread's stack pointer, and oneDNN 2.x's JIT GEMM kernels point rsp into the
// heap while they run (oneDNN issue 4845, fixed in 3.12): a SIGTERM that landed in one corrupted
// the heap ("corrupted size vs. prev_size", about one run in twenty of an interrupted onednn
// training). So installing blocks SIGINT and SIGTERM in the calling thread, whose later threads
// inherit the mask, and one receiver thread that sleeps takes them. Signals are process-directed
// (kill, the terminal's Ctrl-C); std::raise on a thread that blocks them stays pending there.
#pragma once

#include <signal.h>

namespace mosaic {

/// {SIGINT, SIGTERM}: what a child about to exec unblocks (the mask survives exec).
sigset_t interrupt_signals();

/// Installs handlers for SIGINT and SIGTERM that set the flag, blocks both in the calling
/// thread and starts the thread that receives them (once per process). Alone (the default), a second
/// signal of either kind ends the process at once (the default action), for work that does
/// not poll. In a group (`in_group`: one rank of an mpirun job) further signals only set the
/// flag again: the ranks must stop together at a step they agree on (interrupt_agreed), and
/// a Ctrl-C reaches a rank twice (the terminal's SIGINT, then mpirun's SIGTERM); mpirun's
/// SIGKILL, odls_base_sigkill_timeout seconds later (1 by default), is the hard stop.
void install_interrupt_handlers(bool in_group = false);
/// Whether SIGINT or SIGTERM arrived since the handlers were installed.
bool interrupted();
/// The signal that arrived (SIGINT or SIGTERM), 0 if none.
int interrupt_signal();
/// The exit code for the signal that arrived: 128 + signal (130 for SIGINT, 143 for SIGTERM).
int interrupt_exit_code();
/// Sets the flag as a signal would (for tests and for a caller's own stop condition).
void request_interrupt(int signal);

}  // namespace mosaic
