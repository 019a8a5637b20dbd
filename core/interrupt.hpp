// Ctrl-C and SIGTERM as a request, not a kill: long work (timing loops, training steps) polls
// interrupted() and stops at the next safe point, so that what finished is still written and
// recorded (marked "interrupted": true) before the program exits 130 or 143.
#pragma once

namespace mosaic {

/// Installs handlers for SIGINT and SIGTERM that set the flag; a second signal of either kind
/// ends the process at once (the default action), for work that does not poll.
void install_interrupt_handlers();
/// Whether SIGINT or SIGTERM arrived since the handlers were installed.
bool interrupted();
/// The signal that arrived (SIGINT or SIGTERM), 0 if none.
int interrupt_signal();
/// The exit code for the signal that arrived: 128 + signal (130 for SIGINT, 143 for SIGTERM).
int interrupt_exit_code();
/// Sets the flag as a signal would (for tests and for a caller's own stop condition).
void request_interrupt(int signal);

}  // namespace mosaic
