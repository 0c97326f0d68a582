#include "util/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace keel {

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_second_kills{false};
// LeaveAtOnceOnStop's "during <doing>" text, written before it is armed, so
// the handler only reads it.
char g_leave_doing[160];
std::atomic<bool> g_leave_at_once{false};

void write_all(const char* s) {
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

const char* signal_name(int sig);

// Async-signal-safe: an atomic store; for a second signal the default
// action restored and the signal raised again; or (LeaveAtOnceOnStop) a
// message by write() and _exit.
void on_stop_signal(int sig) {
  if (g_leave_at_once.load()) {
    write_all("keel: ");
    write_all(signal_name(sig));
    write_all(" during ");
    write_all(g_leave_doing);
    write_all("; nothing was written\n");
    ::_exit(exit_code::signal_base + sig);
  }
  if (g_second_kills.load() && g_stop_signal.load() != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal.store(sig);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace

void install_stop_handlers(bool second_signal_kills) {
  g_stop_signal.store(0);
  g_second_kills.store(second_signal_kills);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

int stop_signal() { return g_stop_signal.load(); }

bool stop_requested() { return g_stop_signal.load() != 0; }

LeaveAtOnceOnStop::LeaveAtOnceOnStop(const std::string& doing) {
  std::snprintf(g_leave_doing, sizeof g_leave_doing, "%s", doing.c_str());
  g_leave_at_once.store(true);
  if (stop_requested()) {  // a signal that came just before: the handler had only set the flag
    g_leave_at_once.store(false);
    throw_if_stop_requested(doing, "nothing was written");
  }
}

LeaveAtOnceOnStop::~LeaveAtOnceOnStop() { g_leave_at_once.store(false); }

void throw_if_stop_requested(const std::string& doing, const std::string& kept) {
  const int sig = g_stop_signal.load();
  if (sig == 0) return;
  throw Interrupted(std::string(signal_name(sig)) + " during " + doing + "; " + kept, sig);
}

}  // namespace keel
