#include "util/stop_signal.h"

#include <atomic>
#include <csignal>

namespace keel {

namespace {

std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_second_kills{false};

// Async-signal-safe: an atomic store, or for a second signal the default
// action restored and the signal raised again.
void on_stop_signal(int sig) {
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

void throw_if_stop_requested(const std::string& doing, const std::string& kept) {
  const int sig = g_stop_signal.load();
  if (sig == 0) return;
  throw Interrupted(std::string(signal_name(sig)) + " during " + doing + "; " + kept, sig);
}

}  // namespace keel
