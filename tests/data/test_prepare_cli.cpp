// `keel prepare` through the built binary: exit code 0 and a summary on
// success, "nothing to do" the second time, exit code 2 with a message that
// names the file on bad input.
#include <gtest/gtest.h>

#include "test_data_util.h"

using namespace keel_test;

namespace {

bool binary_has_prepare() {
  std::string out;
  run_keel("prepare --help", &out);
  return out.find("--force") != std::string::npos;
}

// A config file for a tiny corpus at `root`; returns its path.
std::string write_config(const std::string& root, const std::string& sources) {
  std::string path = root + "/config.yaml";
  write_text(path, "model:\n  vocab_size: 400\ndata:\n  dir: " + root + "/data\n  sources: " + sources +
                       "\n  shard_tokens: 1024\n  val_fraction: 0.1\n  tokenizer_sample_mb: 1\n");
  return path;
}

}  // namespace

TEST(PrepareCli, PreparesThenDoesNothing) {
  if (!binary_has_prepare()) GTEST_SKIP() << "this keel binary has no prepare subcommand yet";
  std::string root = make_temp_dir("cli");
  write_text(root + "/a.txt", join_documents(make_documents(200, 5)));
  std::string cfg = write_config(root, "[" + root + "/a.txt]");
  std::string out;
  ASSERT_EQ(run_keel("prepare " + cfg + " --quiet", &out), 0) << out;
  EXPECT_NE(out.find("documents  200"), std::string::npos) << out;
  EXPECT_NE(out.find("bytes/token"), std::string::npos) << out;
  ASSERT_EQ(run_keel("prepare " + cfg, &out), 0) << out;
  EXPECT_NE(out.find("already prepared"), std::string::npos) << out;
  ASSERT_EQ(run_keel("prepare " + cfg + " --verify", &out), 0) << out;
  EXPECT_NE(out.find("verified"), std::string::npos) << out;
  // Different settings: refused (2) unless forced.
  EXPECT_EQ(run_keel("prepare " + cfg + " --set data.val_fraction=0.2 --quiet", &out), 2) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  EXPECT_EQ(run_keel("prepare " + cfg + " --set data.val_fraction=0.2 --force --quiet", &out), 0) << out;
}

TEST(PrepareCli, BadInputExitsWithTwoAndNamesTheFile) {
  if (!binary_has_prepare()) GTEST_SKIP() << "this keel binary has no prepare subcommand yet";
  std::string root = make_temp_dir("cli");
  std::string out;
  std::string cfg = write_config(root, "[" + root + "/missing.txt]");
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet", &out), 2) << out;
  EXPECT_NE(out.find(root + "/missing.txt"), std::string::npos) << out;

  write_text(root + "/bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": broken\n");
  cfg = write_config(root, "[" + root + "/bad.jsonl]");
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet", &out), 2) << out;
  EXPECT_NE(out.find(root + "/bad.jsonl:2"), std::string::npos) << out;
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet --set data.bogus=1", &out), 2) << out;  // config error

  // A zstd file cut short: exit 2 naming the file and the offset, and no
  // prepared directory (nothing half-written becomes data.dir).
  const std::string packed = zstd_bytes(join_documents(make_documents(300, 7)));
  write_text(root + "/cut.txt.zst", packed.substr(0, packed.size() * 2 / 3));
  cfg = write_config(root, "[" + root + "/cut.txt.zst]");
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet", &out), 2) << out;
  EXPECT_NE(out.find(root + "/cut.txt.zst"), std::string::npos) << out;
  EXPECT_NE(out.find("compressed byte offset " + std::to_string(packed.size() * 2 / 3)), std::string::npos) << out;
  EXPECT_FALSE(exists(root + "/data"));
  for (const auto& name : keel::list_directory(root)) EXPECT_NE(name.rfind("data.tmp-", 0), 0u) << name;

  write_text(root + "/a.txt", join_documents(make_documents(100, 6)));
  cfg = write_config(root, "[" + root + "/a.txt]");
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet --set model.vocab_size=270", &out), 2) << out;
  EXPECT_NE(out.find("model.vocab_size"), std::string::npos) << out;
  EXPECT_FALSE(exists(root + "/data/manifest.json"));
}
