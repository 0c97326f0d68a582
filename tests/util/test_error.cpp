// Which exit code an exception ends keel with (util/error.h's table): the
// one place that decides, so a regression here changes every command.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <stdexcept>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "util/child_process.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/stop_signal.h"

namespace {

TEST(ExitCodeOf, EveryErrorKindHasItsCode) {
  EXPECT_EQ(keel::exit_code_of(std::runtime_error("a bug")), 1);
  EXPECT_EQ(keel::exit_code_of(keel::DataError("corpus.txt: bad")), 2);
  keel::ConfigErrors errors;
  errors.add("train.lr", "must be > 0");
  EXPECT_EQ(keel::exit_code_of(keel::ConfigError(errors)), 2);
  EXPECT_EQ(keel::exit_code_of(keel::PeerFailure("rank 1 died")), 4);
  EXPECT_EQ(keel::exit_code_of(keel::EnvironmentError("disk full")), 4);
  EXPECT_EQ(keel::exit_code_of(keel::Interrupted("SIGTERM during encoding", 15)), 143);
}

// A file error is the input's fault unless errno says the machine refused.
TEST(ExitCodeOf, FileErrorsFollowErrno) {
  for (int err : {ENOSPC, EDQUOT, EROFS, EIO, EACCES, EPERM, EMFILE, ENFILE})
    EXPECT_EQ(keel::exit_code_for_errno(err), 4) << err;
  for (int err : {ENOENT, ENOTDIR, ENAMETOOLONG, EISDIR, EEXIST})
    EXPECT_EQ(keel::exit_code_for_errno(err), 2) << err;
  EXPECT_EQ(keel::exit_code_of(keel::FileError("x: cannot write", keel::exit_code_for_errno(ENOSPC))), 4);
}

// Writing into a directory that cannot exist: 2, with the path and the reason.
TEST(ExitCodeOf, FileHelpersCarryTheErrnoCode) {
  try {
    keel::write_file_atomic("/proc/self/keel-no-such-dir/x", "data");
    FAIL() << "wrote into /proc";
  } catch (const keel::FileError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/self/keel-no-such-dir"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2) << e.what();
  }
}

TEST(StopSignal, ThrowsInterruptedOnlyAfterASignal) {
  keel::install_stop_handlers();
  EXPECT_NO_THROW(keel::throw_if_stop_requested("work", "nothing kept"));
  raise(SIGINT);  // the handler only records it
  ASSERT_EQ(keel::stop_signal(), SIGINT);
  try {
    keel::throw_if_stop_requested("encoding", "nothing kept");
    FAIL() << "no Interrupted";
  } catch (const keel::Interrupted& e) {
    EXPECT_EQ(e.exit_code(), 130);
    EXPECT_STREQ(e.what(), "SIGINT during encoding; nothing kept");
  }
  keel::install_stop_handlers();  // clears the request
  EXPECT_FALSE(keel::stop_requested());
}

// The parent's side of a pipe a forked child writes its stderr to: all of it,
// until the child ends.
std::string read_child_stderr(int fds[2]) {
  close(fds[1]);
  std::string err;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  return err;
}

// Inside LeaveAtOnceOnStop a signal ends the process at once with 128 + N and
// a line naming what it interrupted; outside it the flag is only set again;
// a signal that came before it is thrown on entry, and leaves it disarmed.
TEST(StopSignal, LeaveAtOnceEndsTheProcessOnlyInsideItsScope) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    keel::install_stop_handlers();
    {
      keel::LeaveAtOnceOnStop leave("a test's wait");
    }
    raise(SIGINT);  // after the scope: recorded only
    if (keel::stop_signal() != SIGINT) _exit(10);
    try {
      keel::LeaveAtOnceOnStop leave("the entry");
      _exit(11);
    } catch (const keel::Interrupted&) {
    }
    raise(SIGINT);  // the failed entry left it disarmed
    keel::install_stop_handlers();
    keel::LeaveAtOnceOnStop leave("a test's wait");
    raise(SIGTERM);
    _exit(12);  // not reached
  }
  const std::string err = read_child_stderr(fds);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << err;
  EXPECT_EQ(err, "keel: SIGTERM during a test's wait; nothing was written\n");
}

// Whether SIGINT and SIGTERM are both blocked in the calling thread.
bool stop_signals_blocked() {
  sigset_t m;
  pthread_sigmask(SIG_BLOCK, nullptr, &m);
  return sigismember(&m, SIGINT) == 1 && sigismember(&m, SIGTERM) == 1;
}

// Waits (at most 5 s) until stop_signal() is `sig`.
bool saw_signal(int sig) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (keel::stop_signal() != sig && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return keel::stop_signal() == sig;
}

// Routed (keel's main): this thread and the threads it starts block SIGINT
// and SIGTERM, a child started for a sweep point does not, and a signal sent
// to the process still reaches what is installed for it: the stop flag, then
// LeaveAtOnceOnStop's exit.
TEST(StopSignal, RoutedSignalsRunWhatIsInstalledOnTheirOwnThread) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  char log[] = "/tmp/keel_test_routed_XXXXXX";
  const int log_fd = mkstemp(log);
  ASSERT_GE(log_fd, 0);
  close(log_fd);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    if (stop_signals_blocked()) _exit(9);  // the test itself must start unblocked
    keel::route_stop_signals();
    if (!stop_signals_blocked()) _exit(10);
    bool thread_blocks = false;
    std::thread([&] { thread_blocks = stop_signals_blocked(); }).join();
    if (!thread_blocks) _exit(11);
    const pid_t kid = keel::start_logged_child({"/bin/grep", "SigBlk", "/proc/self/status"}, log);
    int status = 0;
    if (waitpid(kid, &status, 0) != kid || keel::exit_code_of(status) != 0) _exit(12);
    const std::string line = keel::read_small_file(log);
    const unsigned long long mask = std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
    if (mask & ((1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1)))) _exit(13);
    keel::install_stop_handlers();
    kill(getpid(), SIGINT);  // process-directed, as a shell sends it
    if (!saw_signal(SIGINT)) _exit(14);
    keel::install_stop_handlers();
    keel::LeaveAtOnceOnStop leave("a routed wait");
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    _exit(15);  // not reached
  }
  const std::string err = read_child_stderr(fds);
  unlink(log);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << err;
  EXPECT_EQ(err, "keel: SIGTERM during a routed wait; nothing was written\n");
}

// Routed, a second signal with second_signal_kills and a signal with no
// handler end the process by the signal, as they would unrouted.
TEST(StopSignal, RoutedSignalsStillKillWhereTheDefaultWould) {
  for (const bool installed : {true, false}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      keel::route_stop_signals();
      if (installed) {
        keel::install_stop_handlers(/*second_signal_kills=*/true);
        kill(getpid(), SIGINT);
        if (!saw_signal(SIGINT)) _exit(10);
      } else {
        signal(SIGINT, SIG_DFL);
      }
      kill(getpid(), SIGINT);
      std::this_thread::sleep_for(std::chrono::seconds(10));
      _exit(11);  // not reached
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "installed " << installed << ": exit " << WEXITSTATUS(status);
    EXPECT_EQ(WTERMSIG(status), SIGINT) << "installed " << installed;
  }
}

}  // namespace

namespace {

// Two processes writing whole lines through write_stderr into one pipe (as
// keel launch and its workers share the terminal or a test's capture): every
// line arrives whole. DataParallel.LauncherExitCodes once failed because the
// launcher's chained `std::cerr <<` let a worker's error land inside
// "keel launch: rank 1".
TEST(WriteStderr, LinesFromTwoProcessesDoNotInterleave) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const int lines = 300;
  std::vector<pid_t> kids;
  for (char c : {'a', 'b'}) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      dup2(fds[1], STDERR_FILENO);
      const std::string line = std::string("keel launch: ") + std::string(500, c) + "\n";
      for (int i = 0; i < lines; ++i) keel::write_stderr(line);
      _exit(0);
    }
    kids.push_back(pid);
  }
  close(fds[1]);
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    ASSERT_GT(n, 0);
    all.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  for (pid_t pid : kids) waitpid(pid, nullptr, 0);
  int whole = 0;
  for (size_t start = 0; start < all.size();) {
    const size_t nl = all.find('\n', start);
    ASSERT_NE(nl, std::string::npos);
    const std::string line = all.substr(start, nl - start);
    const bool a = line == "keel launch: " + std::string(500, 'a'), b = line == "keel launch: " + std::string(500, 'b');
    EXPECT_TRUE(a || b) << "a torn line: " << line.substr(0, 80);
    whole += a || b;
    start = nl + 1;
  }
  EXPECT_EQ(whole, 2 * lines);
}

}  // namespace
