// `keel prepare` as a library: output that decodes back to the input, a
// stable validation split, idempotence, refusal to clobber, no half-written
// output, and ensure_prepared's checks for the trainer.
#include <gtest/gtest.h>

#include <algorithm>
#include <sys/stat.h>
#include <set>

#include "data/manifest.h"
#include "data/prepare_settings.h"
#include "data/sources.h"
#include "data/token_stream.h"
#include "data/tokenizer.h"
#include "test_data_util.h"
#include "util/error.h"

using namespace keel;
using namespace keel_test;

namespace {

// The documents of one split, decoded from the shards (EOS-separated).
std::vector<std::string> decoded_documents(const std::string& dir, const std::string& split) {
  DataManifest m = read_data_manifest(dir);
  Tokenizer tok(dir + "/tokenizer.model");
  TokenStream s(dir, m, split, /*deep_verify=*/true);
  std::vector<int64_t> ids(s.size());
  s.read(0, s.size(), ids.data());
  std::vector<std::string> docs;
  std::vector<int64_t> cur;
  for (int64_t id : ids) {
    if (id == tok.eos_id()) {
      docs.push_back(tok.decode(cur));
      cur.clear();
    } else {
      cur.push_back(id);
    }
  }
  EXPECT_TRUE(cur.empty()) << "the stream must end with EOS";
  return docs;
}

std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// No "<dir>.tmp-*" or "<dir>.old-*" left beside `dir`.
void expect_no_leftovers(const std::string& dir) {
  const std::string base = base_name(dir);
  for (const auto& name : list_directory(dir_name(dir))) {
    EXPECT_NE(name.rfind(base + ".tmp-", 0), 0u) << "left behind: " << name;
    EXPECT_NE(name.rfind(base + ".old-", 0), 0u) << "left behind: " << name;
  }
}

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  ::stat(path.c_str(), &st);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

// A zstd source prepares to the same tokens as its plain text; the manifest
// records the compression, and a manifest from before zstd (a "gzip" flag)
// still reads.
TEST(Prepare, ZstdSourcesGiveTheTokensOfTheirText) {
  std::string root = make_temp_dir("prep_zstd");
  const std::string text = join_documents(make_documents(120, 21));
  write_text(root + "/plain/a.txt", text);
  write_zstd(root + "/packed/a.txt.zst", text, 3);
  PrepareResult plain = prepare_quietly(tiny_config(root + "/out_plain", {root + "/plain"}));
  PrepareResult packed = prepare_quietly(tiny_config(root + "/out_packed", {root + "/packed"}));
  EXPECT_EQ(packed.manifest.sources.at(0).compression, "zstd");
  EXPECT_EQ(packed.manifest.sources.at(0).text_bytes, plain.manifest.sources.at(0).text_bytes);
  EXPECT_EQ(decoded_documents(root + "/out_packed", "train"), decoded_documents(root + "/out_plain", "train"));
  EXPECT_EQ(decoded_documents(root + "/out_packed", "val"), decoded_documents(root + "/out_plain", "val"));
  ASSERT_EQ(packed.manifest.shards.size(), plain.manifest.shards.size());
  for (size_t i = 0; i < plain.manifest.shards.size(); ++i)
    EXPECT_EQ(packed.manifest.shards[i].crc32, plain.manifest.shards[i].crc32) << i;

  auto j = data_manifest_to_json(packed.manifest);
  j["sources"][0].erase("compression");
  j["sources"][0]["gzip"] = true;
  EXPECT_EQ(data_manifest_from_json(j, "old manifest").sources[0].compression, "gzip");
  j["sources"][0]["compression"] = "lz4";
  try {
    data_manifest_from_json(j, "odd manifest");
    ADD_FAILURE() << "an unknown compression was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown compression 'lz4'"), std::string::npos) << e.what();
  }
}

// data.text_field is part of the settings only when set, so directories
// prepared before the key existed keep their fingerprint.
TEST(Prepare, TextFieldEntersTheSettingsOnlyWhenSet) {
  std::string root = make_temp_dir("prep_field");
  std::string jsonl;
  for (const auto& d : make_documents(60, 22)) jsonl += nlohmann::json{{"body", d}, {"text", 1}}.dump() + "\n";
  write_text(root + "/a.jsonl", jsonl);
  Config c = tiny_config(root + "/out", {root + "/a.jsonl"});
  EXPECT_FALSE(prepare_settings(c, expand_sources(c.data.sources), "").contains("text_field"));
  EXPECT_THROW(prepare_quietly(c), DataError);  // "text" is a number here
  c.data.text_field = "body";
  PrepareResult r = prepare_quietly(c);
  EXPECT_EQ(r.manifest.train.documents + r.manifest.val.documents, 60);
  EXPECT_EQ(r.manifest.settings.at("text_field"), "body");
}

TEST(Prepare, ShardsDecodeBackToTheDocuments) {
  std::string root = make_temp_dir("prep");
  auto docs_a = make_documents(150, 11), docs_b = make_documents(60, 12);
  write_text(root + "/src/a.txt", join_documents(docs_a));
  write_gzip(root + "/src/sub/b.txt.gz", join_documents(docs_b));
  std::string jsonl;
  for (const auto& d : make_documents(40, 13)) jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
  write_text(root + "/src/c.jsonl", jsonl);
  Config c = tiny_config(root + "/out/data", {root + "/src"});
  PrepareResult r = prepare_quietly(c);
  EXPECT_TRUE(r.built);
  const DataManifest& m = r.manifest;

  EXPECT_EQ(m.train.documents + m.val.documents, 250);
  EXPECT_GT(m.val.documents, 5);
  EXPECT_LT(m.val.documents, 50);
  EXPECT_EQ(m.sources.size(), 3u);
  EXPECT_EQ(m.sources[0].path, root + "/src/a.txt");
  EXPECT_EQ(m.sources[0].documents, 150);
  EXPECT_EQ(m.sources[1].format, "jsonl");
  EXPECT_EQ(m.sources[2].compression, "gzip");
  EXPECT_EQ(m.sources[0].compression, "none");
  EXPECT_EQ(m.tokenizer.vocab_size, 400);
  EXPECT_EQ(m.tokenizer.eos_id, 2);
  EXPECT_EQ(m.tokenizer.origin, "trained");
  EXPECT_EQ(m.dtype, "uint16");
  EXPECT_GT(m.bytes_per_token, 1.0);
  EXPECT_GT(m.shards.size(), 4u);  // 1024-token shards
  int64_t total = 0;
  for (const auto& s : m.shards) {
    EXPECT_LE(s.tokens, 1024);
    total += s.tokens;
  }
  EXPECT_EQ(total, m.train.tokens + m.val.tokens);
  EXPECT_EQ(read_data_manifest(c.data.dir).fingerprint, m.fingerprint);

  std::vector<std::string> all = docs_a, docs_c = make_documents(40, 13);
  all.insert(all.end(), docs_c.begin(), docs_c.end());
  all.insert(all.end(), docs_b.begin(), docs_b.end());
  std::vector<std::string> train = decoded_documents(c.data.dir, "train"), val = decoded_documents(c.data.dir, "val");
  EXPECT_EQ(static_cast<int64_t>(train.size()), m.train.documents);
  EXPECT_EQ(static_cast<int64_t>(val.size()), m.val.documents);
  // Train keeps source order (a.txt, c.jsonl, sub/b.txt.gz), minus held-out documents.
  std::vector<std::string> expected_train;
  std::set<std::string> val_set = as_set(val);
  for (const auto& d : all)
    if (!val_set.count(d)) expected_train.push_back(d);
  EXPECT_EQ(train, expected_train);
  EXPECT_NO_THROW(verify_prepared(c.data.dir));
  expect_no_leftovers(c.data.dir);
}

TEST(Prepare, OutputIsDeterministicAndIndependentOfThreads) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/a.txt", join_documents(make_documents(300, 21)));
  Config c1 = tiny_config(root + "/one", {root + "/a.txt"});
  Config c2 = tiny_config(root + "/two", {root + "/a.txt"});
  c1.data.threads = 1;
  c2.data.threads = 3;
  auto m1 = prepare_quietly(c1).manifest, m2 = prepare_quietly(c2).manifest;
  EXPECT_EQ(m1.fingerprint, m2.fingerprint);
  ASSERT_EQ(m1.shards.size(), m2.shards.size());
  EXPECT_EQ(read_bytes(c1.data.dir + "/tokenizer.model"), read_bytes(c2.data.dir + "/tokenizer.model"));
  for (const auto& s : m1.shards)
    EXPECT_EQ(read_bytes(c1.data.dir + "/" + s.file), read_bytes(c2.data.dir + "/" + s.file)) << s.file;
}

TEST(Prepare, IsIdempotentAndRefusesDifferentSettingsUnlessForced) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/a.txt", join_documents(make_documents(100, 31)));
  Config c = tiny_config(root + "/data", {root + "/a.txt"});
  auto first = prepare_quietly(c);
  auto mtime = mtime_ns(c.data.dir + "/manifest.json");
  auto again = prepare_quietly(c);
  EXPECT_FALSE(again.built);
  EXPECT_EQ(again.manifest.fingerprint, first.manifest.fingerprint);
  EXPECT_EQ(mtime_ns(c.data.dir + "/manifest.json"), mtime);

  Config changed = c;
  changed.data.val_fraction = 0.2;
  std::string msg = error_of([&] { prepare_quietly(changed); });
  expect_contains(msg, "was prepared with different settings");
  expect_contains(msg, "val_fraction was 0.1, now 0.2");
  expect_contains(msg, "--force");
  append_text(root + "/a.txt", "\n<|endoftext|>\nOne more document.\n");
  expect_contains(error_of([&] { prepare_quietly(c); }), "source " + root + "/a.txt changed size");

  auto forced = prepare_quietly(changed, /*force=*/true);
  EXPECT_TRUE(forced.built);
  EXPECT_EQ(read_data_manifest(c.data.dir).fingerprint, forced.manifest.fingerprint);
  EXPECT_EQ(forced.manifest.train.documents + forced.manifest.val.documents, 101);
  expect_no_leftovers(c.data.dir);
}

TEST(Prepare, ValidationSplitIsStableWhenFilesAreAppendedOrAdded) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/a.txt", join_documents(make_documents(200, 41)));
  Config c = tiny_config(root + "/before", {root + "/a.txt", root + "/b.txt"});
  write_text(root + "/b.txt", join_documents(make_documents(50, 42)));
  prepare_quietly(c);
  auto val_before = as_set(decoded_documents(c.data.dir, "val"));
  auto train_before = as_set(decoded_documents(c.data.dir, "train"));

  append_text(root + "/a.txt", "<|endoftext|>\n" + join_documents(make_documents(100, 43)));
  write_text(root + "/c.txt", join_documents(make_documents(100, 44)));
  Config grown = tiny_config(root + "/after", {root + "/c.txt", root + "/a.txt", root + "/b.txt"});
  prepare_quietly(grown);
  auto val_after = as_set(decoded_documents(grown.data.dir, "val"));
  auto train_after = as_set(decoded_documents(grown.data.dir, "train"));
  EXPECT_GT(val_after.size(), val_before.size());
  for (const auto& d : val_before) EXPECT_TRUE(val_after.count(d)) << "moved out of val: " << d;
  for (const auto& d : train_before) EXPECT_TRUE(train_after.count(d)) << "moved out of train: " << d;
}

TEST(Prepare, BadInputLeavesNothingThatLooksPrepared) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/a.txt", join_documents(make_documents(100, 51)));
  write_text(root + "/b.txt", "fine\n<|endoftext|>\nbroken \xC3\x28 text\n");
  Config c = tiny_config(root + "/data", {root + "/a.txt", root + "/b.txt"});
  std::string msg = error_of([&] { prepare_quietly(c); });
  expect_contains(msg, root + "/b.txt:3: invalid UTF-8 at byte offset 26");
  EXPECT_FALSE(exists(c.data.dir));
  expect_no_leftovers(c.data.dir);

  // A directory killed mid-run leaves "<dir>.tmp-*"; the next run removes it.
  ensure_directory(c.data.dir + ".tmp-ABC123");
  write_text(root + "/b.txt", "fine\n");
  prepare_quietly(c);
  EXPECT_TRUE(has_data_manifest(c.data.dir));
  expect_no_leftovers(c.data.dir);
}

TEST(Prepare, EmptyOrMissingCorpusIsAClearError) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/empty.txt", "\n<|endoftext|>\n\n<|endoftext|>\n");
  Config c = tiny_config(root + "/data", {root + "/empty.txt"});
  expect_contains(error_of([&] { prepare_quietly(c); }), "no text to train the tokenizer on");
  Config missing = tiny_config(root + "/data", {root + "/nope.txt"});
  expect_contains(error_of([&] { prepare_quietly(missing); }), root + "/nope.txt: listed in data.sources but does not exist");
  EXPECT_FALSE(exists(c.data.dir));
  // An existing tokenizer skips training, so emptiness is found by the encoder.
  write_text(root + "/a.txt", join_documents(make_documents(100, 52)));
  Config ok = tiny_config(root + "/ok", {root + "/a.txt"});
  prepare_quietly(ok);
  c.data.tokenizer = ok.data.dir + "/tokenizer.model";
  expect_contains(error_of([&] { prepare_quietly(c); }), "holds no non-empty documents: the corpus is empty");
  EXPECT_FALSE(exists(c.data.dir));
}

TEST(Prepare, RefusesToReplaceADirectoryThatIsNotPreparedData) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/a.txt", join_documents(make_documents(50, 61)));
  write_text(root + "/data/precious.txt", "user data");
  Config c = tiny_config(root + "/data", {root + "/a.txt"});
  expect_contains(error_of([&] { prepare_quietly(c); }), "holds no manifest.json");
  EXPECT_TRUE(exists(root + "/data/precious.txt"));
}

TEST(Prepare, ReusesAnExistingTokenizer) {
  std::string root = make_temp_dir("prep");
  write_text(root + "/a.txt", join_documents(make_documents(100, 71)));
  Config first = tiny_config(root + "/first", {root + "/a.txt"});
  prepare_quietly(first);
  Config reuse = tiny_config(root + "/reuse", {root + "/a.txt"});
  reuse.data.tokenizer = first.data.dir + "/tokenizer.model";
  DataManifest m = prepare_quietly(reuse).manifest;
  EXPECT_EQ(m.tokenizer.origin, reuse.data.tokenizer);
  EXPECT_EQ(m.tokenizer.sha256, read_data_manifest(first.data.dir).tokenizer.sha256);
  EXPECT_EQ(decoded_documents(reuse.data.dir, "train"), decoded_documents(first.data.dir, "train"));
  reuse.model.vocab_size = 512;
  expect_contains(error_of([&] { prepare_quietly(reuse, true); }), "has 400 pieces but model.vocab_size = 512");
}

TEST(EnsurePrepared, PreparesOnceThenChecksTheConfig) {
  std::string root = make_temp_dir("ens");
  write_text(root + "/a.txt", join_documents(make_documents(100, 81)));
  Config c = tiny_config(root + "/data", {root + "/a.txt"});
  PrepareOptions quiet;
  quiet.quiet = true;
  DataManifest m = ensure_prepared(c, quiet);
  EXPECT_TRUE(has_data_manifest(c.data.dir));
  EXPECT_EQ(ensure_prepared(c, quiet).fingerprint, m.fingerprint);

  Config vocab = c;
  vocab.model.vocab_size = 512;
  std::string msg = error_of([&] { ensure_prepared(vocab, quiet); });
  expect_contains(msg, "tokenizer of 400 pieces but model.vocab_size = 512");

  // A different tokenizer named in the config than the one the shards used.
  Config other = tiny_config(root + "/other", {root + "/a.txt"});
  write_text(root + "/b.txt", join_documents(make_documents(100, 82)) + "\nzebra quartz jukebox\n");
  other.data.sources = {root + "/b.txt"};
  prepare_quietly(other);
  Config named = c;
  named.data.tokenizer = other.data.dir + "/tokenizer.model";
  msg = error_of([&] { ensure_prepared(named, quiet); });
  expect_contains(msg, "shards were made with a different tokenizer than data.tokenizer = " + named.data.tokenizer);

  Config sep = c;
  sep.data.doc_separator = "%";
  expect_contains(error_of([&] { ensure_prepared(sep, quiet); }), "doc_separator");

  // Prepared data travels without its sources: a warning, not an error.
  std::rename((root + "/a.txt").c_str(), (root + "/a.moved").c_str());
  EXPECT_NO_THROW(ensure_prepared(c, quiet));
}

TEST(EnsurePrepared, DetectsDamagedShards) {
  std::string root = make_temp_dir("ens");
  write_text(root + "/a.txt", join_documents(make_documents(100, 91)));
  Config c = tiny_config(root + "/data", {root + "/a.txt"});
  PrepareOptions quiet;
  quiet.quiet = true;
  DataManifest m = ensure_prepared(c, quiet);
  std::string shard = c.data.dir + "/" + m.shards[1].file;
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  expect_contains(error_of([&] { verify_prepared(c.data.dir); }), shard + ": checksum mismatch");
  truncate_file(shard, static_cast<int64_t>(keel::file_size(shard)) - 2);
  expect_contains(error_of([&] { ensure_prepared(c, quiet); }), shard + ": size mismatch");
  expect_contains(error_of([&] { prepare_quietly(c); }), shard + ": size mismatch");
  EXPECT_TRUE(prepare_quietly(c, /*force=*/true).built);
  EXPECT_NO_THROW(verify_prepared(c.data.dir));
}
