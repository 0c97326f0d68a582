#include "data/corpus_reader.h"

#include <zlib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "util/error.h"
#include "util/utf8.h"

namespace keel {

namespace {

constexpr size_t kBlock = size_t{1} << 20;

// A plain or gzip-compressed file read in blocks.
class Input {
 public:
  explicit Input(const SourceFile& f) : path_(f.path) {
    if (f.gzip) {
      gz_ = gzopen(path_.c_str(), "rb");
      if (!gz_) throw data_error(path_, std::string("cannot open: ") + std::strerror(errno));
      gzbuffer(gz_, 1 << 17);
    } else {
      file_ = std::fopen(path_.c_str(), "rb");
      if (!file_) throw data_error(path_, std::string("cannot open: ") + std::strerror(errno));
    }
  }
  ~Input() {
    if (gz_) gzclose(gz_);
    if (file_) std::fclose(file_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  // Up to n bytes; 0 at the end of the file.
  size_t read(char* dst, size_t n) {
    if (file_) {
      size_t got = std::fread(dst, 1, n, file_);
      if (got < n && std::ferror(file_))
        throw data_error(path_, std::string("read error: ") + std::strerror(errno));
      done_ += got;
      return got;
    }
    int got = gzread(gz_, dst, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    if (got < 0 || (err != Z_OK && err != Z_STREAM_END))
      throw data_error(path_, "gzip error after " + std::to_string(done_) +
                                  " uncompressed bytes: " + (msg ? msg : "unknown") +
                                  " (truncated or corrupted file?)");
    if (done_ == 0 && got > 0 && gzdirect(gz_))
      throw data_error(path_, "named .gz but is not gzip-compressed");
    done_ += static_cast<size_t>(got);
    return static_cast<size_t>(got);
  }

 private:
  std::string path_;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
  size_t done_ = 0;
};

// Lines of an Input, each with its '\n' (the last one may lack it).
class LineReader {
 public:
  explicit LineReader(Input& in) : in_(in) {}
  bool next(std::string_view* line) {
    for (;;) {
      const char* start = buf_.data() + pos_;
      size_t avail = buf_.size() - pos_;
      if (const void* nl = std::memchr(start, '\n', avail)) {
        size_t len = static_cast<size_t>(static_cast<const char*>(nl) - start) + 1;
        *line = std::string_view(start, len);
        pos_ += len;
        return true;
      }
      if (eof_) {
        if (avail == 0) return false;
        *line = std::string_view(start, avail);
        pos_ += avail;
        return true;
      }
      buf_.erase(0, pos_);  // keep the partial line; a long line grows the buffer
      pos_ = 0;
      size_t old = buf_.size(), want = std::max(kBlock, old);
      buf_.resize(old + want);
      size_t got = in_.read(&buf_[old], want);
      buf_.resize(old + got);
      if (got == 0) eof_ = true;
    }
  }

 private:
  Input& in_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
};

// The terminator of a document's last line is not part of the document.
void strip_final_newline(std::string& s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (!s.empty() && s.back() == '\r') s.pop_back();
}

std::string_view without_newline(std::string_view line) {
  if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

}  // namespace

void read_records(const SourceFile& file, int32_t index, const std::string& separator,
                  const std::function<bool(Record&&)>& emit) {
  Input in(file);
  if (file.format == SourceFormat::text && separator.empty()) {
    Record r;
    r.file = index;
    std::string& s = r.bytes;
    for (;;) {
      size_t old = s.size();
      s.resize(old + kBlock);
      size_t got = in.read(&s[old], kBlock);
      s.resize(old + got);
      if (got == 0) break;
    }
    strip_final_newline(s);
    if (!s.empty()) emit(std::move(r));
    return;
  }

  LineReader lines(in);
  std::string_view line;
  int64_t line_no = 0, offset = 0;
  if (file.format == SourceFormat::jsonl) {
    while (lines.next(&line)) {
      ++line_no;
      if (!is_blank(line)) {
        Record r{std::string(without_newline(line)), index, line_no, offset};
        if (!emit(std::move(r))) return;
      }
      offset += static_cast<int64_t>(line.size());
    }
    return;
  }

  Record doc{std::string(), index, 1, 0};
  auto flush = [&]() {
    strip_final_newline(doc.bytes);
    bool go_on = doc.bytes.empty() || emit(std::move(doc));
    doc = Record{std::string(), index, line_no + 1, offset};
    return go_on;
  };
  while (lines.next(&line)) {
    ++line_no;
    if (without_newline(line) == separator) {
      offset += static_cast<int64_t>(line.size());
      if (!flush()) return;
      continue;
    }
    doc.bytes.append(line.data(), line.size());
    offset += static_cast<int64_t>(line.size());
  }
  flush();
}

bool decode_record(Record& r, const SourceFile& file) {
  if (file.format == SourceFormat::jsonl) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(r.bytes);
    } catch (const nlohmann::json::parse_error& e) {
      int64_t at = r.offset + (e.byte > 0 ? static_cast<int64_t>(e.byte) - 1 : 0);
      throw data_error(file.path + ":" + std::to_string(r.line),
                       "invalid JSON line (byte offset " + std::to_string(at) + "): " + e.what());
    }
    auto it = j.is_object() ? j.find("text") : j.end();
    if (!j.is_object() || it == j.end() || !it->is_string())
      throw data_error(file.path + ":" + std::to_string(r.line),
                       "expected a JSON object with a string field \"text\" (byte offset " +
                           std::to_string(r.offset) + ")");
    r.bytes = it->get<std::string>();
  }
  size_t bad = first_invalid_utf8(r.bytes);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(r.bytes[bad]));
    if (file.format == SourceFormat::jsonl)  // nlohmann rejects this first; kept as a guard
      throw data_error(file.path + ":" + std::to_string(r.line), std::string("invalid UTF-8 in \"text\" (") + hex + ")");
    int64_t line = r.line + std::count(r.bytes.begin(), r.bytes.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    throw data_error(file.path + ":" + std::to_string(line), "invalid UTF-8 at byte offset " +
                                                                 std::to_string(r.offset + static_cast<int64_t>(bad)) +
                                                                 " (byte " + hex + ")");
  }
  return !r.bytes.empty();
}

}  // namespace keel
