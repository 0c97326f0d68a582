#include "data/corpus_reader.h"
#include "data/parquet_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "util/error.h"
#include "util/utf8.h"

namespace keel {

namespace {

constexpr size_t kBlock = size_t{1} << 20;

// A plain, gzip- or zstd-compressed file read in blocks.
class Input {
 public:
  explicit Input(const SourceFile& f) : path_(f.path), compression_(f.compression) {
    if (compression_ == Compression::gzip) {
      gz_ = gzopen(path_.c_str(), "rb");
      if (!gz_) throw data_error(path_, std::string("cannot open: ") + std::strerror(errno));
      gzbuffer(gz_, 1 << 17);
      return;
    }
    file_ = std::fopen(path_.c_str(), "rb");
    if (!file_) throw data_error(path_, std::string("cannot open: ") + std::strerror(errno));
    if (compression_ == Compression::zstd) {
      zstd_ = ZSTD_createDCtx();
      if (!zstd_) throw data_error(path_, "cannot allocate a zstd decoder");
      // A frame asking for a window above 128 MiB (zstd --long=31) is refused
      // with an error rather than allocating what a hostile header names.
      ZSTD_DCtx_setParameter(zstd_, ZSTD_d_windowLogMax, 27);
      packed_.resize(ZSTD_DStreamInSize());
    }
  }
  ~Input() {
    if (gz_) gzclose(gz_);
    if (file_) std::fclose(file_);
    if (zstd_) ZSTD_freeDCtx(zstd_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  // Up to n bytes; 0 at the end of the file.
  size_t read(char* dst, size_t n) {
    size_t got = 0;
    switch (compression_) {
      case Compression::none: got = read_raw(dst, n); break;
      case Compression::gzip: got = read_gzip(dst, n); break;
      case Compression::zstd: got = read_zstd(dst, n); break;
    }
    done_ += got;
    return got;
  }

 private:
  size_t read_raw(char* dst, size_t n) {
    size_t got = std::fread(dst, 1, n, file_);
    if (got < n && std::ferror(file_)) throw data_error(path_, std::string("read error: ") + std::strerror(errno));
    return got;
  }

  size_t read_gzip(char* dst, size_t n) {
    int got = gzread(gz_, dst, static_cast<unsigned>(std::min<size_t>(n, 1u << 30)));
    int err = Z_OK;
    const char* msg = gzerror(gz_, &err);
    if (got < 0 || (err != Z_OK && err != Z_STREAM_END))
      throw data_error(path_, "gzip error after " + std::to_string(done_) +
                                  " uncompressed bytes: " + (msg ? msg : "unknown") +
                                  " (truncated or corrupted file?)");
    if (done_ == 0 && got > 0 && gzdirect(gz_))
      throw data_error(path_, "named .gz but is not gzip-compressed");
    return static_cast<size_t>(got);
  }

  // Streams the frames one after another (pzstd and zstd -T write several).
  size_t read_zstd(char* dst, size_t n) {
    ZSTD_outBuffer out{dst, n, 0};
    while (out.pos == 0) {
      // More input only once the decoder has given out all it holds: a call
      // that filled the output may have more to flush from the same input.
      if (in_.pos == in_.size && !flush_pending_) {
        const size_t got = read_raw(packed_.data(), packed_.size());
        if (got == 0) {
          if (frame_open_)
            throw data_error(path_, "zstd stream ends inside a frame at compressed byte offset " +
                                        std::to_string(packed_done_) + " (after " + std::to_string(done_) +
                                        " uncompressed bytes): truncated file?");
          return 0;
        }
        if (packed_done_ == 0 && !starts_with_zstd_magic(packed_.data(), got))
          throw data_error(path_, "named .zst but is not zstd-compressed (no zstd frame magic at byte 0)");
        in_ = ZSTD_inBuffer{packed_.data(), got, 0};
      }
      const size_t before = in_.pos;
      const size_t ret = ZSTD_decompressStream(zstd_, &out, &in_);
      packed_done_ += static_cast<int64_t>(in_.pos - before);
      if (ZSTD_isError(ret))
        throw data_error(path_, std::string("zstd error near compressed byte offset ") + std::to_string(packed_done_) +
                                    " (after " + std::to_string(done_ + out.pos) +
                                    " uncompressed bytes): " + ZSTD_getErrorName(ret) + " (corrupted file?)");
      frame_open_ = ret != 0;  // 0: a frame just ended cleanly
      flush_pending_ = out.pos == out.size;
    }
    return out.pos;
  }

  static bool starts_with_zstd_magic(const char* p, size_t n) {
    if (n < 4) return false;
    const uint32_t magic = uint32_t(uint8_t(p[0])) | uint32_t(uint8_t(p[1])) << 8 | uint32_t(uint8_t(p[2])) << 16 |
                           uint32_t(uint8_t(p[3])) << 24;
    return magic == ZSTD_MAGICNUMBER || (magic & ZSTD_MAGIC_SKIPPABLE_MASK) == ZSTD_MAGIC_SKIPPABLE_START;
  }

  std::string path_;
  Compression compression_;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
  size_t done_ = 0;  // uncompressed bytes handed out
  // zstd
  ZSTD_DCtx* zstd_ = nullptr;
  std::vector<char> packed_;  // compressed bytes read from the file
  ZSTD_inBuffer in_{nullptr, 0, 0};
  int64_t packed_done_ = 0;   // compressed bytes consumed
  bool frame_open_ = false, flush_pending_ = false;
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
  if (file.format == SourceFormat::parquet) return read_parquet_records(file, index, emit);
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
    auto it = j.is_object() ? j.find(file.text_field) : j.end();
    if (!j.is_object() || it == j.end() || !it->is_string())
      throw data_error(file.path + ":" + std::to_string(r.line),
                       "expected a JSON object with a string field \"" + file.text_field + "\" (byte offset " +
                           std::to_string(r.offset) + "; data.text_field names the field)");
    r.bytes = it->get<std::string>();
  }
  size_t bad = first_invalid_utf8(r.bytes);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned char>(r.bytes[bad]));
    if (file.format == SourceFormat::jsonl)  // nlohmann rejects this first; kept as a guard
      throw data_error(file.path + ":" + std::to_string(r.line),
                       "invalid UTF-8 in \"" + file.text_field + "\" (" + hex + ")");
    if (file.format == SourceFormat::parquet)  // line: the row; offset: its row group
      throw data_error(file.path, "row " + std::to_string(r.line) + " (row group " + std::to_string(r.offset) +
                                      "): invalid UTF-8 in column \"" + file.text_field + "\" at byte " +
                                      std::to_string(bad) + " of the value (" + hex + ")");
    int64_t line = r.line + std::count(r.bytes.begin(), r.bytes.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
    throw data_error(file.path + ":" + std::to_string(line), "invalid UTF-8 at byte offset " +
                                                                 std::to_string(r.offset + static_cast<int64_t>(bad)) +
                                                                 " (byte " + hex + ")");
  }
  return !r.bytes.empty();
}

}  // namespace keel
