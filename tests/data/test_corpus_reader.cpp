// Reading sources: document boundaries, JSONL, gzip, zstd, directory expansion,
// and errors that name the file, line and byte offset.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "data/corpus_reader.h"
#include "data/sources.h"
#include "test_data_util.h"
#include "util/error.h"
#include "util/utf8.h"

using namespace keel;
using namespace keel_test;

namespace {

std::vector<Record> records(const std::string& path, const std::string& sep = "<|endoftext|>") {
  auto files = expand_sources({path});
  std::vector<Record> out;
  read_records(files[0], 0, sep, [&](Record&& r) {
    if (decode_record(r, files[0])) out.push_back(std::move(r));  // empty documents are dropped
    return true;
  });
  return out;
}

// The DataError message from decoding every record of `path`.
std::string decode_error(const std::string& path, const std::string& sep = "%") {
  auto files = expand_sources({path});
  try {
    read_records(files[0], 0, sep, [&](Record&& r) {
      decode_record(r, files[0]);
      return true;
    });
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

}  // namespace

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(first_invalid_utf8("plain ascii text that is long enough for the fast path"), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x99\x82"), std::string::npos);
  EXPECT_EQ(first_invalid_utf8("abc\xFF"), 3u);
  EXPECT_EQ(first_invalid_utf8("ab\xC0\x80"), 2u);          // overlong NUL
  EXPECT_EQ(first_invalid_utf8("\xED\xA0\x80"), 0u);        // surrogate
  EXPECT_EQ(first_invalid_utf8("0123456789\xF4\x90\x80\x80"), 10u);  // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8("truncated \xE6\x9D"), 10u);
  EXPECT_EQ(first_invalid_utf8("lone continuation \x80"), 18u);
}

TEST(CorpusReader, SeparatorLinesSplitDocuments) {
  std::string dir = make_temp_dir("rd");
  write_text(dir + "/a.txt", "first doc\nline two\n%\nsecond\r\n%\r\n%\n\nthird after blank\n");
  auto r = records(dir + "/a.txt", "%");
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].bytes, "first doc\nline two");   // the last line's terminator is dropped
  EXPECT_EQ(r[1].bytes, "second");                // CRLF, and "%\r" is a separator
  EXPECT_EQ(r[2].bytes, "\nthird after blank");   // the empty document between separators is dropped
  EXPECT_EQ(r[0].line, 1);
  EXPECT_EQ(r[1].line, 4);
  EXPECT_EQ(r[2].line, 7);
  EXPECT_EQ(r[1].offset, 21);
}

TEST(CorpusReader, EmptySeparatorMeansOneDocumentPerFile) {
  std::string dir = make_temp_dir("rd");
  write_text(dir + "/a.txt", "whole\n%\nfile\n");
  auto r = records(dir + "/a.txt", "");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].bytes, "whole\n%\nfile");
}

TEST(CorpusReader, JsonlTakesTheTextFieldAndSkipsBlankLines) {
  std::string dir = make_temp_dir("rd");
  write_text(dir + "/a.jsonl", "{\"text\": \"one\\nline\", \"id\": 1}\n\n  \n{\"text\": \"caf\\u00e9\"}\n{\"text\": \"\"}\n");
  auto r = records(dir + "/a.jsonl");
  ASSERT_EQ(r.size(), 2u);  // the empty "text" is dropped
  EXPECT_EQ(r[0].bytes, "one\nline");
  EXPECT_EQ(r[1].bytes, "caf\xC3\xA9");
  EXPECT_EQ(r[1].line, 4);
  EXPECT_EQ(r[1].offset, 35);  // 31 + 1 + 3 bytes of the lines before it
}

TEST(CorpusReader, GzipReadsLikePlainText) {
  std::string dir = make_temp_dir("rd");
  std::string text = join_documents(make_documents(50, 3));
  write_text(dir + "/a.txt", text);
  write_gzip(dir + "/b.txt.gz", text);
  write_gzip(dir + "/c.jsonl.gz", "{\"text\": \"zipped\"}\n");
  auto plain = records(dir + "/a.txt"), zipped = records(dir + "/b.txt.gz");
  ASSERT_EQ(plain.size(), 50u);
  ASSERT_EQ(zipped.size(), 50u);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(plain[i].bytes, zipped[i].bytes);
  EXPECT_EQ(records(dir + "/c.jsonl.gz")[0].bytes, "zipped");
  auto files = expand_sources({dir + "/b.txt.gz"});
  EXPECT_EQ(files[0].compression, Compression::gzip);
  EXPECT_EQ(estimated_text_bytes(files[0]), static_cast<int64_t>(text.size()));
}

TEST(CorpusReader, TruncatedOrFakeGzipIsAnErrorNamingTheFile) {
  std::string dir = make_temp_dir("rd");
  write_gzip(dir + "/full.txt.gz", join_documents(make_documents(300, 4)));
  std::string bytes = read_bytes(dir + "/full.txt.gz");
  write_text(dir + "/cut.txt.gz", bytes.substr(0, bytes.size() / 2));
  std::string msg = decode_error(dir + "/cut.txt.gz");
  expect_contains(msg, dir + "/cut.txt.gz");
  expect_contains(msg, "gzip error");
  write_text(dir + "/fake.txt.gz", "not compressed at all\n");
  msg = decode_error(dir + "/fake.txt.gz");
  expect_contains(msg, dir + "/fake.txt.gz");
  expect_contains(msg, "not gzip");
}

// zstd (issue 18): DCLM's .jsonl.zst, Dolma's .json.gz / .json.zst (JSON
// Lines by another name), single and concatenated frames.
TEST(CorpusReader, ZstdReadsLikePlainTextInOneFrameOrMany) {
  std::string dir = make_temp_dir("rd");
  std::string text = join_documents(make_documents(200, 5));
  write_text(dir + "/a.txt", text);
  write_zstd(dir + "/b.txt.zst", text);
  write_zstd(dir + "/c.txt.zst", text, 7);  // frame ends fall inside lines and documents
  std::string jsonl;
  for (const auto& d : make_documents(30, 6)) jsonl += nlohmann::json{{"text", d}}.dump() + "\n";
  write_zstd(dir + "/d.jsonl.zst", jsonl, 3);
  write_zstd(dir + "/e.json.zst", jsonl);
  write_gzip(dir + "/f.json.gz", jsonl);
  write_zstd(dir + "/empty.txt.zst", "");
  const auto plain = records(dir + "/a.txt");
  ASSERT_EQ(plain.size(), 200u);
  for (const char* name : {"/b.txt.zst", "/c.txt.zst"}) {
    const auto z = records(dir + name);
    ASSERT_EQ(z.size(), plain.size()) << name;
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(z[i].bytes, plain[i].bytes) << name << " document " << i;
      EXPECT_EQ(z[i].offset, plain[i].offset) << name << " document " << i;  // offsets are uncompressed
    }
  }
  const auto json = records(dir + "/d.jsonl.zst");
  ASSERT_EQ(json.size(), 30u);
  for (const char* name : {"/e.json.zst", "/f.json.gz"}) {
    const auto j = records(dir + name);
    ASSERT_EQ(j.size(), json.size()) << name;
    for (size_t i = 0; i < json.size(); ++i) EXPECT_EQ(j[i].bytes, json[i].bytes) << name;
  }
  EXPECT_TRUE(records(dir + "/empty.txt.zst").empty());
  auto files = expand_sources({dir + "/b.txt.zst", dir + "/c.txt.zst", dir + "/e.json.zst"});
  EXPECT_EQ(files[0].compression, Compression::zstd);
  EXPECT_EQ(files[0].format, SourceFormat::text);
  EXPECT_EQ(files[2].format, SourceFormat::jsonl);
  // The frame header holds the size: exact for one frame, an estimate for several.
  EXPECT_EQ(estimated_text_bytes(files[0]), static_cast<int64_t>(text.size()));
  EXPECT_GT(estimated_text_bytes(files[1]), 0);
}

TEST(CorpusReader, TruncatedCorruptOrFakeZstdNamesTheFileAndOffset) {
  std::string dir = make_temp_dir("rd");
  const std::string text = join_documents(make_documents(300, 4));
  const std::string bytes = zstd_bytes(text);
  ASSERT_LT(bytes.size(), text.size() / 2);
  // Cut inside the frame: the stream ends before the frame does.
  write_text(dir + "/cut.txt.zst", bytes.substr(0, bytes.size() / 2));
  std::string msg = decode_error(dir + "/cut.txt.zst");
  expect_contains(msg, dir + "/cut.txt.zst");
  expect_contains(msg, "ends inside a frame at compressed byte offset " + std::to_string(bytes.size() / 2));
  // A flipped byte in the compressed data: a decoding or checksum error, with
  // an offset inside the file.
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x5A;
  write_text(dir + "/flipped.txt.zst", flipped);
  msg = decode_error(dir + "/flipped.txt.zst");
  expect_contains(msg, dir + "/flipped.txt.zst");
  expect_contains(msg, "zstd error near compressed byte offset ");
  const auto at = msg.find("compressed byte offset ");
  EXPECT_LE(std::stoll(msg.substr(at + 23)), static_cast<long long>(bytes.size())) << msg;
  // A second frame that is damaged after a good first one.
  write_text(dir + "/second.txt.zst", zstd_bytes("first frame\n") + "\x28\xb5\x2f\xfd garbage");
  msg = decode_error(dir + "/second.txt.zst");
  expect_contains(msg, dir + "/second.txt.zst");
  expect_contains(msg, "zstd");
  // Not zstd at all, and too short to be.
  write_text(dir + "/fake.txt.zst", "not compressed at all\n");
  expect_contains(decode_error(dir + "/fake.txt.zst"), "not zstd-compressed");
  write_text(dir + "/short.txt.zst", "ab");
  expect_contains(decode_error(dir + "/short.txt.zst"), "not zstd-compressed");
}

// data.text_field: FineWeb-style dumps that keep the document elsewhere.
TEST(CorpusReader, JsonlTextFieldNamesTheDocumentsField) {
  std::string dir = make_temp_dir("rd");
  write_zstd(dir + "/a.jsonl.zst", "{\"content\": \"first\", \"text\": 3}\n{\"content\": \"second\"}\n");
  auto files = expand_sources({dir + "/a.jsonl.zst"}, "content");
  ASSERT_EQ(files[0].text_field, "content");
  std::vector<std::string> docs;
  read_records(files[0], 0, "", [&](Record&& r) {
    if (decode_record(r, files[0])) docs.push_back(r.bytes);
    return true;
  });
  EXPECT_EQ(docs, (std::vector<std::string>{"first", "second"}));
  // The default field is "text", here a number: the error names it and the key.
  const std::string msg = decode_error(dir + "/a.jsonl.zst");
  expect_contains(msg, dir + "/a.jsonl.zst:1");
  expect_contains(msg, "string field \"text\"");
  expect_contains(msg, "data.text_field");
}

TEST(CorpusReader, InvalidUtf8NamesFileLineAndOffset) {
  std::string dir = make_temp_dir("rd");
  write_text(dir + "/bad.txt", "good line\n%\nline two\nbad \xFF here\n");
  std::string msg = decode_error(dir + "/bad.txt");
  expect_contains(msg, dir + "/bad.txt:4");
  expect_contains(msg, "invalid UTF-8 at byte offset 25");
  expect_contains(msg, "0xFF");
}

TEST(CorpusReader, InvalidJsonlLinesNameFileAndLine) {
  std::string dir = make_temp_dir("rd");
  write_text(dir + "/a.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"text\": oops}\n");
  std::string msg = decode_error(dir + "/a.jsonl");
  expect_contains(msg, dir + "/a.jsonl:3");
  expect_contains(msg, "invalid JSON");
  expect_contains(msg, "byte offset 39");  // the 'o' of oops
  write_text(dir + "/b.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text field\"}\n");
  msg = decode_error(dir + "/b.jsonl");
  expect_contains(msg, dir + "/b.jsonl:2");
  expect_contains(msg, "string field \"text\"");
  write_text(dir + "/c.jsonl", "{\"text\": 42}\n");
  expect_contains(decode_error(dir + "/c.jsonl"), dir + "/c.jsonl:1");
  write_text(dir + "/d.jsonl", "{\"text\": \"bad \xC3 utf8\"}\n");
  msg = decode_error(dir + "/d.jsonl");
  expect_contains(msg, dir + "/d.jsonl:1");
  expect_contains(msg, "UTF-8");
}

TEST(Sources, DirectoriesAreWalkedInOrderWithFilters) {
  std::string dir = make_temp_dir("src");
  write_text(dir + "/b.txt", "b");
  write_text(dir + "/a/z.md", "z");
  write_text(dir + "/a/y.jsonl.gz", "");
  write_text(dir + "/a/w.json.zst", "");   // Dolma / DCLM: JSON Lines
  write_text(dir + "/a/v.json", "{}");     // plain .json is not read from a directory
  write_text(dir + "/c.txt.gz", "");
  write_text(dir + "/d.jsonl.zst", "");
  write_text(dir + "/skip.bin", "binary");
  write_text(dir + "/.hidden.txt", "hidden");
  write_text(dir + "/.git/x.txt", "git");
  auto files = expand_sources({dir});
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.path.substr(dir.size() + 1));
  EXPECT_EQ(paths, (std::vector<std::string>{"a/w.json.zst", "a/y.jsonl.gz", "a/z.md", "b.txt", "c.txt.gz",
                                              "d.jsonl.zst"}));
  EXPECT_EQ(files[0].format, SourceFormat::jsonl);
  EXPECT_EQ(files[0].compression, Compression::zstd);
  files.erase(files.begin());
  EXPECT_EQ(files[0].format, SourceFormat::jsonl);
  EXPECT_EQ(files[0].compression, Compression::gzip);
  EXPECT_EQ(files[1].format, SourceFormat::text);
  // A listed file is read whatever its name.
  EXPECT_EQ(expand_sources({dir + "/skip.bin"}).size(), 1u);
}

TEST(Sources, ProblemsNameThePath) {
  std::string dir = make_temp_dir("src");
  auto error_of = [](const std::vector<std::string>& s) {
    try {
      expand_sources(s);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  expect_contains(error_of({dir + "/nope.txt"}), dir + "/nope.txt: listed in data.sources but does not exist");
  expect_contains(error_of({dir}), "holds no *.txt");
  write_text(dir + "/a.txt", "a");
  expect_contains(error_of({dir + "/a.txt", dir}), "reached twice");
  expect_contains(error_of({}), "data.sources is empty");
  if (::geteuid() != 0) {  // root reads anything
    write_text(dir + "/locked.txt", "x");
    ::chmod((dir + "/locked.txt").c_str(), 0);
    expect_contains(error_of({dir + "/locked.txt"}), dir + "/locked.txt: not readable");
  }
}

#ifndef KEEL_WITH_PARQUET
// A keel built without Arrow (scripts/build/sanitize.sh's build-asan is one) still
// finds .parquet files and refuses them saying why, instead of reading them
// as text.
TEST(CorpusReader, ParquetOffSaysSo) {
  std::string dir = make_temp_dir("parquet_off");
  write_text(dir + "/part-0.parquet", "PAR1 whatever PAR1");
  auto files = expand_sources({dir});
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].format, SourceFormat::parquet);
  try {
    read_records(files[0], 0, "", [](Record&&) { return true; });
    ADD_FAILURE() << "a Parquet file was read without Arrow";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("part-0.parquet: is Parquet, and this keel was built without Parquet support"),
              std::string::npos)
        << e.what();
  }
}
#endif

// Issue 31: a gzip file is read member after member, as gzip -d reads it;
// bytes after the last member that do not start another are an error naming
// the file and their offset. zlib's gzread skipped them without a word, and
// the trailer they displaced made the tokenizer's size estimate absurd.
TEST(CorpusReader, GzipMembersFollowEachOtherAndTrailingBytesAreAnError) {
  std::string dir = make_temp_dir("rd_gz");
  const auto docs = make_documents(60, 9);
  const std::vector<std::string> first(docs.begin(), docs.begin() + 30), second(docs.begin() + 30, docs.end());
  write_text(dir + "/plain.txt", join_documents(docs));
  write_gzip(dir + "/a.gz", join_documents(first) + "<|endoftext|>\n");
  write_gzip(dir + "/b.gz", join_documents(second));
  const std::string member = read_bytes(dir + "/a.gz"), all = member + read_bytes(dir + "/b.gz");
  write_text(dir + "/two.txt.gz", all);
  const auto plain = records(dir + "/plain.txt"), two = records(dir + "/two.txt.gz");
  ASSERT_EQ(two.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(two[i].bytes, plain[i].bytes) << i;

  const std::string offset = "compressed byte offset " + std::to_string(all.size());
  for (const std::string& tail : {std::string("garbage after the member\n"), std::string("\x1f"),
                                  std::string(512, '\0'), std::string("\x1f\x8b")}) {
    SCOPED_TRACE(tail.size());
    const std::string path = dir + "/tail.txt.gz";
    write_text(path, all + tail);
    const std::string msg = decode_error(path, "<|endoftext|>");
    expect_contains(msg, path);
    // "\x1f\x8b" starts a member that never ends: a truncated member, not garbage.
    expect_contains(msg, tail == "\x1f\x8b" ? "inside the member at" : "not another gzip member");
    expect_contains(msg, offset);
  }
  // The trailer of such a file is no size: the estimate stays near the file's.
  write_text(dir + "/tail.txt.gz", all + std::string(8, '\xff'));
  const auto files = expand_sources({dir + "/tail.txt.gz"});
  EXPECT_LE(estimated_text_bytes(files[0]), 3 * files[0].bytes);
}
