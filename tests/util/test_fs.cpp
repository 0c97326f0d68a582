// util/fs.h's rm -rf: what run.overwrite, a sweep point starting over and
// keel prepare --force delete with. A symbolic link is removed, never
// followed: not inside the tree, not as the tree itself, and not when the
// path is written with a trailing slash (which makes lstat(2) follow it).
#include <gtest/gtest.h>
#include <unistd.h>

#include "test_util.h"
#include "util/fs.h"

namespace {

class RemoveTree : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = keel_test::make_temp_dir("fs_remove_tree");
    keel::ensure_directory(dir_ + "/elsewhere/sub");
    keel_test::write_file(elsewhere_file(), "keep me");
    keel_test::write_file(dir_ + "/elsewhere/sub/b.txt", "keep me too");
  }
  void TearDown() override { keel::remove_tree(dir_); }

  std::string elsewhere_file() const { return dir_ + "/elsewhere/a.txt"; }
  void expect_elsewhere_intact() const {
    EXPECT_EQ(keel_test::read_file(elsewhere_file()), "keep me");
    EXPECT_EQ(keel_test::read_file(dir_ + "/elsewhere/sub/b.txt"), "keep me too");
  }
  void link(const std::string& target, const std::string& at) const {
    ASSERT_EQ(::symlink(target.c_str(), at.c_str()), 0) << at;
  }

  std::string dir_;
};

}  // namespace

TEST_F(RemoveTree, RemovesLinksInsideTheTreeNotWhatTheyPointTo) {
  keel::ensure_directory(dir_ + "/run/checkpoints");
  keel_test::write_file(dir_ + "/run/config.yaml", "x");
  link(dir_ + "/elsewhere", dir_ + "/run/checkpoints/linked_dir");
  link(elsewhere_file(), dir_ + "/run/linked_file");
  keel::remove_tree(dir_ + "/run");
  EXPECT_FALSE(keel::path_exists(dir_ + "/run"));
  expect_elsewhere_intact();
}

TEST_F(RemoveTree, ALinkGivenAsTheTreeIsUnlinkedEvenWithATrailingSlash) {
  for (const char* suffix : {"", "/", "//"}) {
    SCOPED_TRACE(std::string("suffix '") + suffix + "'");
    link(dir_ + "/elsewhere", dir_ + "/link");
    keel::remove_tree(dir_ + "/link" + suffix);
    EXPECT_FALSE(keel::path_exists(dir_ + "/link"));
    expect_elsewhere_intact();

    link(dir_ + "/elsewhere", dir_ + "/link");
    keel::remove_tree_best_effort(dir_ + "/link" + suffix);
    EXPECT_FALSE(keel::path_exists(dir_ + "/link"));
    expect_elsewhere_intact();
  }
}

TEST_F(RemoveTree, ARealDirectoryGoesWithATrailingSlashToo) {
  keel::ensure_directory(dir_ + "/plain/inner");
  keel_test::write_file(dir_ + "/plain/inner/c.txt", "c");
  keel::remove_tree(dir_ + "/plain/");
  EXPECT_FALSE(keel::path_exists(dir_ + "/plain"));
  expect_elsewhere_intact();
}
