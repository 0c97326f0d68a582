// `keel prepare` through the built binary: exit code 0 and a summary on
// success, "nothing to do" the second time, exit code 2 with a message that
// names the file on bad input.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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

// --force rebuilds only a directory keel prepared (issue 31): one without
// the data manifest holds someone's files and is refused (exit 2, named),
// and data.dir as a symbolic link is read through but never replaced (the
// rename would swap the link for a new directory). An empty directory is
// simply filled.
TEST(PrepareCli, ForceReplacesOnlyAPreparedDirectoryAndNeverALink) {
  std::string root = make_temp_dir("cli_force");
  write_text(root + "/a.txt", join_documents(make_documents(120, 8)));
  const std::string cfg = write_config(root, "[" + root + "/a.txt]");
  std::string out;
  auto prepare = [&](const std::string& dir, const std::string& extra) {
    return run_keel("prepare " + cfg + " --quiet --set data.dir=" + dir + " " + extra, &out);
  };

  keel::ensure_directory(root + "/plain");
  write_text(root + "/plain/keep.txt", "not keel's");
  for (const char* force : {"--force", ""}) {
    SCOPED_TRACE(force);
    EXPECT_EQ(prepare(root + "/plain", force), 2) << out;
    EXPECT_NE(out.find(root + "/plain exists but holds no manifest.json"), std::string::npos) << out;
    EXPECT_EQ(keel::list_directory(root + "/plain"), std::vector<std::string>{"keep.txt"});
  }

  // A link to someone's directory, and a link to prepared data elsewhere.
  ASSERT_EQ(::symlink((root + "/plain").c_str(), (root + "/to-plain").c_str()), 0);
  EXPECT_EQ(prepare(root + "/to-plain", "--force"), 2) << out;
  EXPECT_EQ(keel::list_directory(root + "/plain"), std::vector<std::string>{"keep.txt"});
  ASSERT_EQ(prepare(root + "/prepared", ""), 0) << out;
  const std::string manifest = read_bytes(root + "/prepared/manifest.json");
  ASSERT_EQ(::symlink((root + "/prepared").c_str(), (root + "/to-prepared").c_str()), 0);
  EXPECT_EQ(prepare(root + "/to-prepared", ""), 0) << out;  // reading through the link is fine
  EXPECT_EQ(prepare(root + "/to-prepared", "--force"), 2) << out;
  EXPECT_NE(out.find(root + "/to-prepared: is a symbolic link"), std::string::npos) << out;
  EXPECT_EQ(read_bytes(root + "/prepared/manifest.json"), manifest);
  for (const char* link : {"/to-plain", "/to-prepared"}) {
    struct stat st;
    ASSERT_EQ(::lstat((root + link).c_str(), &st), 0) << link;
    EXPECT_TRUE(S_ISLNK(st.st_mode)) << link << " was replaced";
  }

  keel::ensure_directory(root + "/empty");
  EXPECT_EQ(prepare(root + "/empty", ""), 0) << out;
  EXPECT_TRUE(exists(root + "/empty/manifest.json"));
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

  // Parquet that is not: exit 2 naming the file, in builds with or without Arrow.
  write_text(root + "/part-0.parquet", "PAR1 not really parquet PAR1");
  cfg = write_config(root, "[" + root + "/part-0.parquet]");
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet", &out), 2) << out;
  EXPECT_NE(out.find(root + "/part-0.parquet: "), std::string::npos) << out;
  EXPECT_FALSE(exists(root + "/data"));

  write_text(root + "/a.txt", join_documents(make_documents(100, 6)));
  cfg = write_config(root, "[" + root + "/a.txt]");
  // A tokenizer.json keel cannot read exactly: the file and the key.
  write_text(root + "/tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                                       " \"pre_tokenizer\": {\"type\": \"Metaspace\"}}");
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet --set data.tokenizer=" + root + "/tokenizer.json", &out), 2) << out;
  EXPECT_NE(out.find(root + "/tokenizer.json: "), std::string::npos) << out;
  EXPECT_FALSE(exists(root + "/data"));
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet --set model.vocab_size=270", &out), 2) << out;
  EXPECT_NE(out.find("model.vocab_size"), std::string::npos) << out;
  EXPECT_FALSE(exists(root + "/data/manifest.json"));
}

// Weighted sources: prepare reports MB/s and each entry's token share beside
// its weight; the weights are not part of the prepared data, so new weights
// re-tokenize nothing; and `keel train`'s settings table says which source is
// upsampled and which capped.
TEST(PrepareCli, WeightedSourcesReportSharesAndTrainStatesThePlan) {
  std::string root = make_temp_dir("cli_mix");
  write_text(root + "/big.txt", join_documents(make_documents(300, 5)));
  write_text(root + "/small.txt", join_documents(make_documents(5, 6)));
  std::string cfg = write_config(root, "[{path: " + root + "/big.txt, weight: 1}, {path: " + root + "/small.txt, weight: 1}]");
  std::string out;
  ASSERT_EQ(run_keel("prepare " + cfg + " --quiet", &out), 0) << out;
  EXPECT_NE(out.find("MB/s"), std::string::npos) << out;
  EXPECT_NE(out.find("data.sources[1] " + root + "/small.txt: "), std::string::npos) << out;
  EXPECT_NE(out.find("weight 1 (50.0% of sequences)"), std::string::npos) << out;
  // Other weights, same prepared data.
  ASSERT_EQ(run_keel("prepare " + cfg + " --set 'data.sources=[{path: " + root + "/big.txt, weight: 3}, {path: " + root +
                         "/small.txt, weight: 1}]'",
                     &out),
            0)
      << out;
  EXPECT_NE(out.find("already prepared"), std::string::npos) << out;
  EXPECT_NE(out.find("(75.0% of sequences)"), std::string::npos) << out;

  const std::string train = "train " + cfg + " --set model.d_model=32 --set model.n_layers=1 --set model.n_heads=2 " +
                            "--set model.n_kv_heads=1 --set model.d_ff=64 --set model.max_seq_len=32 " +
                            "--set train.device=cpu --set train.max_steps=20 --set train.warmup_steps=2 --set train.batch_size=8 " +
                            "--set train.eval_every=0 --set checkpoint.every=0 --set run.out_dir=" + root + "/runs";
  ASSERT_EQ(run_keel(train, &out), 0) << out;
  EXPECT_NE(out.find("data mixture"), std::string::npos) << out;
  EXPECT_NE(out.find("small.txt: 50.0% of sequences"), std::string::npos) << out;
  EXPECT_NE(out.find("(upsampled)"), std::string::npos) << out;
  EXPECT_NE(out.find("(capped)"), std::string::npos) << out;
  // summary.json: what each source gave the run, 20 steps x 8 sequences.
  const std::string summary = read_bytes(root + "/runs/default/summary.json");
  EXPECT_NE(summary.find("\"data_mixture\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"sequences\": 80"), std::string::npos) << summary;
}

// Issue 31: a gzip member followed by garbage was read without a word, and
// the garbage, read as the gzip trailer, made the tokenizer's sample rate
// near zero: "no text to train the tokenizer on" with 600 documents read.
// Now the garbage is the error, naming the file and its offset (exit 2);
// `keel tokenize` on a file that is no tokenizer says what keel reads.
TEST(PrepareCli, GzipWithTrailingGarbageAndNonTokenizersAreNamed) {
  std::string root = make_temp_dir("cli_gz");
  write_gzip(root + "/a.txt.gz", join_documents(make_documents(600, 4)));
  const std::string member = read_bytes(root + "/a.txt.gz");
  write_text(root + "/a.txt.gz", member + std::string(64, '\x7f'));
  const std::string cfg = write_config(root, "[" + root + "/a.txt.gz]");
  std::string out;
  EXPECT_EQ(run_keel("prepare " + cfg + " --quiet --set data.doc_separator='<|endoftext|>'", &out), 2) << out;
  EXPECT_NE(out.find(root + "/a.txt.gz: bytes after the last complete gzip member, at compressed byte offset " +
                     std::to_string(member.size())),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("no text to train"), std::string::npos) << out;

  write_text(root + "/tokenizer.json", "[\"not\", \"a\", \"tokenizer\"]\n");
  write_text(root + "/t.txt", "hello\n");
  EXPECT_EQ(run_keel("tokenize " + root + "/tokenizer.json " + root + "/t.txt", &out), 2) << out;
  EXPECT_NE(out.find(root + "/tokenizer.json: not a tokenizer keel reads: it is a JSON list"), std::string::npos) << out;
  EXPECT_EQ(out.find("SentencePiece model:"), std::string::npos) << out;
}
