#include "distributed/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>

#include "distributed/dist_env.h"
#include "util/child_process.h"
#include "util/error.h"
#include "util/log.h"
#include "util/stop_signal.h"

namespace keel {

namespace {

std::atomic<int> g_forward_signal{0};
void on_signal(int sig) { g_forward_signal.store(sig); }


std::string describe(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(exit_code_of(status));
}

}  // namespace

int find_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("keel launch: socket(): ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string err = std::strerror(errno);
    close(fd);
    throw std::runtime_error("keel launch: cannot find a free port: " + err);
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

int launch_workers(const LaunchOptions& o) {
  if (o.nproc < 1) throw DistError("keel launch: --nproc must be at least 1");
  if (o.worker_args.empty()) throw DistError("keel launch: nothing to run (usage: keel launch --nproc N -- train CONFIG)");
  const std::string exe = self_exe();
  const int port = o.master_port > 0 ? o.master_port : find_free_port();
  write_stderr("keel launch: " + std::to_string(o.nproc) + " worker(s), rendezvous at " + o.master_addr + ":" +
               std::to_string(port) + "\n");

  g_forward_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  std::vector<pid_t> pids;
  for (int r = 0; r < o.nproc; ++r) {
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("keel launch: fork(): ") + std::strerror(errno));
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
      setenv("GROUP_RANK", "0", 1);
      setenv("MASTER_ADDR", o.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(exe.c_str()));
      for (const auto& a : o.worker_args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      restore_signal_mask_in_child();
      execv(exe.c_str(), argv.data());
      write_stderr("keel launch: exec " + exe + " failed: " + std::strerror(errno) + "\n");
      _exit(127);
    }
    pids.push_back(pid);
  }

  int first_failure = 0;
  size_t alive = pids.size();
  std::vector<bool> done(pids.size(), false);
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  bool killed = false;
  int forwarded = 0;
  while (alive > 0) {
    const int sig = g_forward_signal.exchange(0);
    if (sig != 0) {  // forward Ctrl-C / SIGTERM: the workers save and stop together
      forwarded = sig;
      write_stderr("keel launch: forwarding signal " + std::to_string(sig) + " to the workers\n");
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], sig);
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid || done[i]) continue;
        done[i] = true;
        --alive;
        const int code = exit_code_of(status);
        if (code != 0 && first_failure == 0) {
          first_failure = code;
          write_stderr("keel launch: rank " + std::to_string(i) + " (pid " + std::to_string(pid) + ") " +
                       describe(status) + (alive > 0 ? "; stopping the other workers" : "") + "\n");
          for (size_t j = 0; j < pids.size(); ++j)
            if (!done[j]) kill(pids[j], SIGTERM);
          kill_deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(o.grace_s * 1000));
        }
      }
      continue;
    }
    if (pid < 0 && errno != EINTR && errno != ECHILD) break;
    if (!killed && std::chrono::steady_clock::now() > kill_deadline) {
      killed = true;
      write_stderr("keel launch: workers still running " + strf("%g", o.grace_s) + " s after SIGTERM; killing them\n");
      for (size_t j = 0; j < pids.size(); ++j)
        if (!done[j]) kill(pids[j], SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (first_failure == 0 && forwarded != 0)
    write_stderr("keel launch: workers stopped on signal " + std::to_string(forwarded) + "\n");
  return first_failure;
}

}  // namespace keel
