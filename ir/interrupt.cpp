#include "ir/interrupt.hpp"

#include <csignal>

namespace mosaic {

namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_in_group = 0;

extern "C" void on_signal(int sig) {
  if (g_signal != 0 && !g_in_group) {  // the second one: stop now
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  if (g_signal == 0) g_signal = sig;
}

}  // namespace

void install_interrupt_handlers(bool in_group) {
  g_in_group = in_group ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }
int interrupt_exit_code() { return g_signal ? 128 + g_signal : 0; }
void request_interrupt(int signal) { g_signal = signal; }

}  // namespace mosaic
