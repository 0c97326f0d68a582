// Which exit code an exception ends keel with (util/error.h's table): the
// one place that decides, so a regression here changes every command.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <stdexcept>
#include <string>
#include <vector>

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
  close(fds[1]);
  std::string err;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << err;
  EXPECT_EQ(err, "keel: SIGTERM during a test's wait; nothing was written\n");
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
