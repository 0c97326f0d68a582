// Token shards: written and read back exactly; rejected when truncated,
// bit-flipped, from another format, or holding ids outside the vocabulary.
#include <gtest/gtest.h>

#include <fstream>

#include "data/shard.h"
#include "test_data_util.h"
#include "util/error.h"

using namespace keel;
using namespace keel_test;

namespace {

std::vector<int32_t> ramp(size_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(vocab));
  return v;
}

std::string write_shard(const std::string& path, const std::vector<int32_t>& ids, int64_t vocab) {
  ShardWriter w(path, vocab);
  w.append(ids.data(), ids.size() / 2);  // in two appends, to cover buffering
  w.append(ids.data() + ids.size() / 2, ids.size() - ids.size() / 2);
  w.close();
  return path;
}

void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c;
  f.read(&c, 1);
  c ^= 0x10;
  f.seekp(offset);
  f.write(&c, 1);
}

std::string error_of(const std::string& path) {
  try {
    ShardReader r(path);
    r.verify();
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Shard, RoundTripUint16) {
  std::string dir = make_temp_dir("shard");
  auto ids = ramp(300000, 4096);  // > the 1 MiB write buffer
  write_shard(dir + "/a.bin", ids, 4096);
  ShardReader r(dir + "/a.bin");
  EXPECT_EQ(r.header().token_bytes, 2u);
  EXPECT_EQ(r.header().vocab_size, 4096u);
  EXPECT_EQ(r.size(), 300000);
  EXPECT_NO_THROW(r.verify());
  EXPECT_EQ(keel::file_size(dir + "/a.bin"), 64u + 2u * 300000u);
  std::vector<int64_t> back(ids.size());
  r.read(0, r.size(), back.data());
  for (size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(back[i], ids[i]) << i;
}

TEST(Shard, RoundTripUint32ForLargeVocabularies) {
  std::string dir = make_temp_dir("shard");
  auto ids = ramp(1000, 70000);
  ids[5] = 69999;
  write_shard(dir + "/a.bin", ids, 70000);
  ShardReader r(dir + "/a.bin");
  EXPECT_EQ(r.header().token_bytes, 4u);
  r.verify();
  std::vector<int64_t> back(10);
  r.read(0, 10, back.data());
  EXPECT_EQ(back[5], 69999);
  EXPECT_EQ(token_bytes_for_vocab(65536), 2u);
  EXPECT_EQ(token_bytes_for_vocab(65537), 4u);
}

TEST(Shard, TruncatedIsRejected) {
  std::string dir = make_temp_dir("shard");
  std::string path = write_shard(dir + "/a.bin", ramp(5000, 500), 500);
  truncate_file(path, 64 + 2 * 4999);
  std::string msg = error_of(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("size mismatch"), std::string::npos) << msg;
  truncate_file(path, 10);
  msg = error_of(path);
  EXPECT_NE(msg.find("shorter than the 64-byte header"), std::string::npos) << msg;
}

TEST(Shard, BitFlipInTokensFailsTheChecksum) {
  std::string dir = make_temp_dir("shard");
  std::string path = write_shard(dir + "/a.bin", ramp(5000, 500), 500);
  flip_byte(path, 64 + 2 * 1234);
  ShardReader r(path);  // the header is intact: opening works
  try {
    r.verify();
    FAIL() << "expected a checksum error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": checksum mismatch"), std::string::npos) << e.what();
  }
}

TEST(Shard, DamagedHeaderIsRejected) {
  std::string dir = make_temp_dir("shard");
  std::string path = write_shard(dir + "/a.bin", ramp(100, 500), 500);
  flip_byte(path, 0);
  EXPECT_NE(error_of(path).find("bad magic"), std::string::npos);
  path = write_shard(dir + "/b.bin", ramp(100, 500), 500);
  flip_byte(path, 8);
  EXPECT_NE(error_of(path).find("format version"), std::string::npos);
  path = write_shard(dir + "/c.bin", ramp(100, 500), 500);
  flip_byte(path, 16);  // token count
  EXPECT_NE(error_of(path).find("size mismatch"), std::string::npos);
  path = write_shard(dir + "/d.bin", ramp(100, 500), 500);
  flip_byte(path, 24);  // stored checksum
  EXPECT_NE(error_of(path).find("checksum mismatch"), std::string::npos);
}

TEST(Shard, IdsOutsideTheVocabularyAreRejectedWithTheirOffset) {
  std::string dir = make_temp_dir("shard");
  std::vector<int32_t> ids = {1, 2, 3, 450, 4};
  std::string path = write_shard(dir + "/a.bin", ids, 500);
  // Same bytes, but the header claims a 400-piece vocabulary.
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint32_t vocab = 400;
  f.seekp(28);
  f.write(reinterpret_cast<const char*>(&vocab), 4);
  f.close();
  std::string msg = error_of(path);
  EXPECT_NE(msg.find(path + ": token id 450 at token 3 (byte offset 70)"), std::string::npos) << msg;

  ShardWriter w(dir + "/b.bin", 500);
  std::vector<int32_t> bad = {499, 500};
  EXPECT_THROW(w.append(bad.data(), bad.size()), DataError);
  std::vector<int32_t> negative = {-1};
  EXPECT_THROW(w.append(negative.data(), 1), DataError);
}

TEST(Shard, AnUnfinishedWriteNeverLooksComplete) {
  std::string dir = make_temp_dir("shard");
  {
    ShardWriter w(dir + "/a.bin", 500);
    auto ids = ramp(600000, 500);  // flushes past the header before "crashing"
    w.append(ids.data(), ids.size());
  }  // destroyed without close()
  std::string msg = error_of(dir + "/a.bin");
  EXPECT_NE(msg.find("size mismatch"), std::string::npos) << msg;
}

TEST(Shard, NotAShardAtAll) {
  std::string dir = make_temp_dir("shard");
  write_text(dir + "/x.bin", std::string(100, 'x'));
  EXPECT_NE(error_of(dir + "/x.bin").find("not a keel token shard"), std::string::npos);
  EXPECT_NE(error_of(dir + "/missing.bin").find("cannot open shard"), std::string::npos);
}
