// Parquet sources (parquet_reader.h) on files this test writes with Arrow's
// own writer: rows in order across row groups, nulls and empty values
// dropped, data.text_field naming the column, the same tokens as the same
// documents in JSON Lines, and errors naming the file and row group for a
// missing or non-string column, a truncated file, a corrupt page and invalid
// UTF-8. (A keel built without Arrow: CorpusReader.ParquetOffSaysSo.)
#include <gtest/gtest.h>

#ifdef KEEL_WITH_PARQUET

#include <nlohmann/json.hpp>

#include <optional>

#include "data/corpus_reader.h"
#include "data/parquet_reader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/sources.h"
#include "data/token_stream.h"
#include "parquet_writer.h"
#include "test_data_util.h"
#include "util/error.h"

using namespace keel;
using namespace keel_test;

namespace {

using Values = std::vector<std::optional<std::string>>;

std::vector<Record> read_all(const std::string& path, const std::string& field = "text") {
  auto files = expand_sources({path}, field);
  std::vector<Record> out;
  read_records(files[0], 0, "", [&](Record&& r) {
    if (decode_record(r, files[0])) out.push_back(std::move(r));
    return true;
  });
  return out;
}

std::string read_error(const std::string& path, const std::string& field = "text") {
  try {
    read_all(path, field);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Parquet, RowsInOrderAcrossRowGroupsWithoutNullsOrEmptyValues) {
  std::string dir = make_temp_dir("parquet");
  const Values values = {"first document", std::nullopt, "", "third\nwith two lines", "ünïcödé 😀",
                         "sixth", "seventh", std::nullopt};
  write_parquet(dir + "/a.parquet", values);
  auto files = expand_sources({dir + "/a.parquet"});
  ASSERT_EQ(files[0].format, SourceFormat::parquet);
  EXPECT_STREQ(format_name(files[0].format), "parquet");
  auto records = read_all(dir + "/a.parquet");
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0].bytes, "first document");
  EXPECT_EQ(records[1].bytes, "third\nwith two lines");
  EXPECT_EQ(records[1].line, 4);    // row number in the file
  EXPECT_EQ(records[1].offset, 1);  // its row group (3 rows each)
  EXPECT_EQ(records[4].bytes, "seventh");
  EXPECT_EQ(records[4].offset, 2);
  EXPECT_GT(parquet_text_bytes(files[0]), 0);
  EXPECT_TRUE(parquet_available());
  EXPECT_FALSE(parquet_library_version().empty());
}

TEST(Parquet, TextFieldNamesTheColumnAndBadColumnsNameTheFile) {
  std::string dir = make_temp_dir("parquet_column");
  write_parquet(dir + "/c.parquet", {"a", "b"}, "content");
  EXPECT_EQ(read_all(dir + "/c.parquet", "content").size(), 2u);
  const std::string missing = read_error(dir + "/c.parquet");
  EXPECT_NE(missing.find(dir + "/c.parquet: has no column \"text\" (its columns: id, content"), std::string::npos)
      << missing;
  write_parquet(dir + "/n.parquet", {"a", "b"}, "text", 3, /*int_text=*/true);
  const std::string type = read_error(dir + "/n.parquet");
  EXPECT_NE(type.find("column \"text\" is int64, not a string column"), std::string::npos) << type;
}

TEST(Parquet, TruncatedCorruptOrInvalidUtf8FilesNameFileAndRowGroup) {
  std::string dir = make_temp_dir("parquet_bad");
  Values values;
  uint64_t state = 12345;  // letters that zstd cannot shrink, so the pages fill the file
  for (int i = 0; i < 12; ++i) {
    std::string v = "document " + std::to_string(i) + ": ";
    for (int k = 0; k < 400; ++k) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      v += static_cast<char>('a' + (state >> 59) % 26);
    }
    values.push_back(v);
  }
  write_parquet(dir + "/good.parquet", values, "text", 4);
  const std::string good = read_bytes(dir + "/good.parquet");

  write_text(dir + "/short.parquet", good.substr(0, good.size() / 2));
  std::string e = read_error(dir + "/short.parquet");
  EXPECT_NE(e.find(dir + "/short.parquet: not a readable Parquet file"), std::string::npos) << e;

  write_text(dir + "/fake.parquet", "this is not parquet at all, just text that is long enough");
  e = read_error(dir + "/fake.parquet");
  EXPECT_NE(e.find("fake.parquet: not a readable Parquet file"), std::string::npos) << e;

  // Bytes flipped in the column data: the page CRC (or the decompressor)
  // fails, and the error names the row group. Flips at 10%..60% of the file
  // land in the pages of different row groups (the footer is at the end; a
  // flip in a page header may also be taken for the end of the file).
  ASSERT_EQ(read_all(dir + "/good.parquet").size(), 12u);
  int named_row_group = 0;
  for (int pct = 10; pct <= 60; pct += 5) {
    std::string corrupt = good;
    const size_t at = good.size() * pct / 100;
    for (size_t i = at; i < at + 4; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5A);
    write_text(dir + "/corrupt.parquet", corrupt);
    e = read_error(dir + "/corrupt.parquet");
    if (e.find(dir + "/corrupt.parquet: row group ") != std::string::npos) ++named_row_group;
    else if (!e.empty()) EXPECT_NE(e.find(dir + "/corrupt.parquet"), std::string::npos) << e;
  }
  EXPECT_GE(named_row_group, 5) << "corruption in the data pages should name a row group";

  write_parquet(dir + "/utf8.parquet", {"fine", "also fine", "caf\xC3", "after"}, "text", 2);
  e = read_error(dir + "/utf8.parquet");
  EXPECT_NE(e.find("utf8.parquet: row 3 (row group 1): invalid UTF-8 in column \"text\" at byte 3"), std::string::npos)
      << e;
}

TEST(Parquet, PrepareGivesTheTokensOfTheSameDocumentsInJsonLines) {
  std::string dir = make_temp_dir("parquet_prepare");
  auto docs = make_documents(120, 9);
  Values values(docs.begin(), docs.end());
  ensure_directory(dir + "/pq");
  write_parquet(dir + "/pq/part-0.parquet", Values(values.begin(), values.begin() + 70), "text", 16);
  write_parquet(dir + "/pq/part-1.parquet", Values(values.begin() + 70, values.end()), "text", 16);
  std::string jsonl;
  for (const auto& d : docs) jsonl += nlohmann::json({{"text", d}}).dump() + "\n";
  write_text(dir + "/docs.jsonl", jsonl);

  Config a = tiny_config(dir + "/data-jsonl", {dir + "/docs.jsonl"});
  prepare_quietly(a);
  Config b = tiny_config(dir + "/data-parquet", {dir + "/pq"});
  b.data.tokenizer = a.data.dir + "/tokenizer.model";  // the same tokenizer, so the ids can be compared
  auto r = prepare_quietly(b);
  ASSERT_EQ(r.manifest.sources.size(), 2u);  // the directory's two files, in name order
  EXPECT_EQ(r.manifest.sources[0].format, "parquet");
  for (const char* split : {"train", "val"}) {
    DataManifest ma = read_data_manifest(a.data.dir), mb = read_data_manifest(b.data.dir);
    TokenStream sa(a.data.dir, ma, split, true), sb(b.data.dir, mb, split, true);
    ASSERT_EQ(sa.size(), sb.size()) << split;
    std::vector<int64_t> ta(sa.size()), tb(sb.size());
    sa.read(0, sa.size(), ta.data());
    sb.read(0, sb.size(), tb.data());
    EXPECT_EQ(ta, tb) << split;
  }
}

#else

TEST(Parquet, NotBuilt) { GTEST_SKIP() << "this keel was built without Arrow (KEEL_PARQUET=OFF or no pyarrow)"; }

#endif
