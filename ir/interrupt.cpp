#include "ir/interrupt.hpp"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <thread>

namespace mosaic {

namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_in_group = 0;
pid_t g_receiver_pid = 0;  // the process whose receiver thread runs (a forked child has none)

extern "C" void on_signal(int sig) {
  if (g_signal != 0 && !g_in_group) {  // the second one: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);  // pending until this handler returns; then the default action ends the process
    return;
  }
  if (g_signal == 0) g_signal = sig;
}

sigset_t interrupt_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// The one thread that takes SIGINT and SIGTERM. It computes nothing: it sleeps until a signal
// runs the handler on it, on its own stack.
void receive_signals() {
  const sigset_t s = interrupt_set();
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
  for (;;) pause();
}

}  // namespace

sigset_t interrupt_signals() { return interrupt_set(); }

void install_interrupt_handlers(bool in_group) {
  g_in_group = in_group ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Block both here, before the work starts its threads (OpenMP's, the loaders'), which inherit
  // the mask; the receiver thread alone leaves them open, so the kernel delivers there.
  const sigset_t s = interrupt_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  if (g_receiver_pid != getpid()) {
    g_receiver_pid = getpid();
    std::thread(receive_signals).detach();
  }
}

bool interrupted() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }
int interrupt_exit_code() { return g_signal ? 128 + g_signal : 0; }
void request_interrupt(int signal) { g_signal = signal; }

}  // namespace mosaic
