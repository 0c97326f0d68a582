// Appends that lose nothing silently (issue 31): a refused write is an errno
// at the call, a short one is taken back whole, and the Logger reports the
// first refused train.log line and remembers it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "test_util.h"
#include "util/append_file.h"
#include "util/fs.h"
#include "util/log.h"

namespace {

bool have_dev_full() { return keel::path_kind("/dev/full") != keel::PathKind::missing; }

// RLIMIT_FSIZE for this scope: writes past it fail with EFBIG (SIGXFSZ ignored).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &limit) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  sighandler_t old_handler_;
  bool ok_ = false;
};

}  // namespace

TEST(AppendFile, AppendsWholeLines) {
  const std::string dir = keel_test::make_temp_dir("append_file");
  keel::AppendFile f;
  ASSERT_EQ(f.open(dir + "/log.jsonl"), 0);
  EXPECT_EQ(f.append("one\n"), 0);
  EXPECT_EQ(f.append("two\n"), 0);
  EXPECT_EQ(keel_test::read_file(dir + "/log.jsonl"), "one\ntwo\n");  // at once, no flush needed
  EXPECT_EQ(f.open(dir + "/missing/log.jsonl"), ENOENT);
  EXPECT_EQ(f.append("three\n"), EBADF);
  keel::remove_tree(dir);
}

TEST(AppendFile, FullDiskIsAnErrno) {
  if (!have_dev_full()) GTEST_SKIP() << "no /dev/full";
  keel::AppendFile f;
  ASSERT_EQ(f.open("/dev/full"), 0);
  EXPECT_EQ(f.append("a line\n"), ENOSPC);
}

// A write that stops part-way (the file system fills up during it) leaves
// the file as it was: no half line for a reader, or for the next line to
// be glued to.
TEST(AppendFile, AShortWriteIsTakenBack) {
  const std::string dir = keel_test::make_temp_dir("append_file_short");
  const std::string path = dir + "/metrics.jsonl";
  keel::AppendFile f;
  ASSERT_EQ(f.open(path), 0);
  ASSERT_EQ(f.append("0123456789\n"), 0);  // 11 bytes
  {
    FileSizeLimit limit(16);  // the next line fits 5 of its 11 bytes
    if (!limit.ok()) GTEST_SKIP() << "cannot set RLIMIT_FSIZE";
    EXPECT_EQ(f.append("abcdefghij\n"), EFBIG);
  }
  EXPECT_EQ(keel_test::read_file(path), "0123456789\n");
  EXPECT_EQ(f.append("abcdefghij\n"), 0);  // room again: the line goes on a line of its own
  EXPECT_EQ(keel_test::read_file(path), "0123456789\nabcdefghij\n");
  keel::remove_tree(dir);
}

// train.log on a full disk: reported on stderr at once, naming the file and
// the errno; no later line goes to the file (it would follow a gap).
TEST(Logger, ARefusedLineIsReportedAndRemembered) {
  if (!have_dev_full()) GTEST_SKIP() << "no /dev/full";
  keel::Logger log("/dev/full");
  EXPECT_EQ(log.file_errno(), 0);
  testing::internal::CaptureStderr();
  log.info("step 1");
  log.info("step 2");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.file_errno(), ENOSPC);
  EXPECT_NE(err.find("/dev/full: cannot append a log line: " + std::string(std::strerror(ENOSPC))), std::string::npos)
      << err;
  EXPECT_NE(err.find("step 2"), std::string::npos) << err;  // stderr still gets every line
  EXPECT_EQ(err.find("cannot append", err.find("cannot append") + 1), std::string::npos) << "reported once: " << err;

  const std::string dir = keel_test::make_temp_dir("logger_ok");
  keel::Logger fine(dir + "/train.log");
  fine.info("hello");
  EXPECT_EQ(fine.file_errno(), 0);
  EXPECT_NE(keel_test::read_file(dir + "/train.log").find("hello\n"), std::string::npos);
  keel::remove_tree(dir);
}
