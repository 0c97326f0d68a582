#include "util/stop_signal.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

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

sigset_t g_original_mask;  // before route_stop_signals; empty until it runs

// The routed signals' own thread: each one that comes runs what is installed
// for it now, as the kernel would have on whichever thread it picked.
void run_routed_signals(sigset_t routed) {
  for (;;) {
    siginfo_t info{};
    const int sig = sigwaitinfo(&routed, &info);
    if (sig < 0) continue;  // EINTR
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    if (now.sa_flags & SA_SIGINFO) {
      now.sa_sigaction(sig, &info, nullptr);
    } else if (now.sa_handler == SIG_DFL) {  // SIGINT's and SIGTERM's default: the process ends by the signal
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, sig);
      pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
      ::raise(sig);
    } else if (now.sa_handler != SIG_IGN) {
      now.sa_handler(sig);
    }
  }
}

}  // namespace

void route_stop_signals() {
  sigset_t routed;
  sigemptyset(&routed);
  sigaddset(&routed, SIGINT);
  sigaddset(&routed, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &routed, &g_original_mask);
  std::thread waiter(run_routed_signals, routed);
  pthread_setname_np(waiter.native_handle(), "keel-signals");
  waiter.detach();
}

void restore_signal_mask_in_child() { sigprocmask(SIG_SETMASK, &g_original_mask, nullptr); }

const sigset_t& original_signal_mask() { return g_original_mask; }

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
