// SIGINT and SIGTERM as a request to stop at the next safe point, shared by
// every command that writes something it must not leave half-made (train,
// prepare). The handler only records the signal; the work polls for it.
#pragma once

#include <csignal>
#include <string>

#include "util/error.h"

namespace keel {

// Called first in main(), before any thread starts: blocks SIGINT and
// SIGTERM in this thread, so in every thread started after it, and starts one
// thread ("keel-signals") that waits for them and runs whatever is installed
// for them (the handlers below, a sweep's or a launcher's own, or the default
// action). No thread that computes is ever interrupted by them. Why: the JIT
// f32 GEMM kernels of the oneDNN inside LibTorch (3.10 in PyTorch 2.11) point
// the stack pointer into the heap while they run, so a signal delivered to a
// thread inside one writes its frame over the heap (oneDNN issue 4845, fixed
// upstream by PR 4855): a training run interrupted by SIGINT died of
// "corrupted size vs. prev_size" about once in 150 tries, and at once under a
// stream of signals (tests/cli/test_exit_codes.cpp). A signal another tool
// sends (a sampling profiler's SIGPROF) is not routed and can still do that.
void route_stop_signals();
// For a child between fork and exec (async-signal-safe), and posix_spawn:
// the signal mask the process had before route_stop_signals, so a program
// keel starts gets SIGINT and SIGTERM as usual.
void restore_signal_mask_in_child();
const sigset_t& original_signal_mask();

// Installs the handlers and clears any earlier request. With
// `second_signal_kills`, a second signal while the first is still being
// honoured ends the process at once (for work that polls rarely, such as
// training a tokenizer: what it leaves is a staging directory the next run
// removes).
void install_stop_handlers(bool second_signal_kills = false);
// The signal that asked to stop, or 0.
int stop_signal();
bool stop_requested();

// While one exists, a stop signal ends the process at once (exit 128 + the
// signal, "<signal name> during <doing>; nothing was written" on stderr)
// instead of only setting the flag. For waits inside code that never looks at
// the flag, at a point where nothing has been made: c10d's rendezvous blocks
// in connect and recv for up to dist.timeout_s (300 s by default), so a rank
// whose rank 0 had failed ignored keel launch's SIGTERM and was killed after
// the grace period. A signal that came before it is honoured on entry. One at
// a time.
class LeaveAtOnceOnStop {
 public:
  explicit LeaveAtOnceOnStop(const std::string& doing);
  ~LeaveAtOnceOnStop();
  LeaveAtOnceOnStop(const LeaveAtOnceOnStop&) = delete;
  LeaveAtOnceOnStop& operator=(const LeaveAtOnceOnStop&) = delete;
};

// Work abandoned on a signal before it was finished: nothing half-made was
// kept. Exits 128 + the signal, as a shell would report it.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& message, int signal)
      : Error(message, "interrupted", exit_code::signal_base + signal) {}
};

// Throws Interrupted("<signal name> during <doing>; <kept>") when a stop was requested.
void throw_if_stop_requested(const std::string& doing, const std::string& kept);

}  // namespace keel
