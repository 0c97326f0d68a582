// Which exit code an exception ends keel with (util/error.h's table): the
// one place that decides, so a regression here changes every command.
#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <stdexcept>

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

}  // namespace
