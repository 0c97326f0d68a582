// One writer per run or sweep directory (issue 20, defect 4): a second holder
// is refused naming the first, and the lock goes with its holder, however it
// ends.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "test_util.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/host.h"

using namespace keel;

TEST(DirLock, SecondHolderIsRefusedNamingTheFirst) {
  const std::string dir = keel_test::make_temp_dir("dir_lock") + "/run";
  {
    DirLock first(dir, "run directory");  // creates the directory
    EXPECT_TRUE(is_directory(dir));
    EXPECT_TRUE(dir_is_locked(dir));
    try {
      DirLock second(dir, "run directory");
      ADD_FAILURE() << "a second lock was granted";
    } catch (const RunDirError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(dir + " is in use by keel pid " + std::to_string(::getpid())), std::string::npos) << what;
      EXPECT_NE(what.find(host_name()), std::string::npos) << what;
      EXPECT_EQ(exit_code_of(e), 2);
    }
  }
  EXPECT_FALSE(dir_is_locked(dir));
  EXPECT_NO_THROW(DirLock(dir, "run directory"));  // released with its holder
}

TEST(DirLock, ReleasedWhenTheHolderIsKilled) {
  const std::string dir = keel_test::make_temp_dir("dir_lock_kill");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    DirLock held(dir, "run directory");
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_TRUE(dir_is_locked(dir));
  EXPECT_THROW(DirLock(dir, "sweep directory"), RunDirError);
  ::kill(child, SIGKILL);  // no destructor runs: the kernel releases the lock
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_FALSE(dir_is_locked(dir));
  EXPECT_NO_THROW(DirLock(dir, "sweep directory"));
  ::close(ready[0]);
  ::close(ready[1]);
}
