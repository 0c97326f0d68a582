// The hashes pinned to their published values: the manifest's sha256 must
// match `sha256sum`, shard CRCs must match zlib.crc32, and the split hash must
// never change (it decides which documents are held out).
#include <gtest/gtest.h>

#include "data/split.h"
#include "data/test_data_util.h"
#include "util/hashing.h"

using namespace keel;

TEST(Hashing, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::string path = keel_test::make_temp_dir("hash") + "/m";
  keel_test::write_text(path, million);
  EXPECT_EQ(sha256_file(path), sha256_hex(million));
}

TEST(Hashing, Crc32AndFnvMatchTheirReferences) {
  EXPECT_EQ(crc32_update(0, "123456789", 9), 0xCBF43926u);
  uint32_t split = crc32_update(crc32_update(0, "1234", 4), "56789", 5);
  EXPECT_EQ(split, 0xCBF43926u);
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(Split, IsAFixedFunctionOfTheText) {
  // Pinned: changing the split hash would silently move documents between
  // train and val for every prepared corpus.
  EXPECT_EQ(mix64(fnv1a64("In the beginning")), 0x666dfa1a2949a19aULL);
  std::vector<int> val;
  for (int i = 0; i < 40; ++i)
    if (is_validation_document("doc " + std::to_string(i), 0.1)) val.push_back(i);
  EXPECT_EQ(val, (std::vector<int>{9, 12, 37}));
  int held_out = 0;
  for (int i = 0; i < 20000; ++i) held_out += is_validation_document("doc " + std::to_string(i), 0.1);
  EXPECT_NEAR(held_out / 20000.0, 0.1, 0.01);
  EXPECT_FALSE(is_validation_document("anything", 0.0));
  EXPECT_EQ(is_validation_document("doc 1", 0.1), is_validation_document(std::string("doc ") + "1", 0.1));
}
