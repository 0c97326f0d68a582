// Reading sources: document boundaries, JSONL, gzip, directory expansion,
// and errors that name the file, line and byte offset.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

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
  EXPECT_TRUE(files[0].gzip);
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
  write_text(dir + "/c.txt.gz", "");
  write_text(dir + "/skip.bin", "binary");
  write_text(dir + "/.hidden.txt", "hidden");
  write_text(dir + "/.git/x.txt", "git");
  auto files = expand_sources({dir});
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.path.substr(dir.size() + 1));
  EXPECT_EQ(paths, (std::vector<std::string>{"a/y.jsonl.gz", "a/z.md", "b.txt", "c.txt.gz"}));
  EXPECT_EQ(files[0].format, SourceFormat::jsonl);
  EXPECT_TRUE(files[0].gzip);
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
