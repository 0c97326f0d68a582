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
    file_ = std::fopen(path_.c_str(), "rb");
    if (!file_) throw data_error(path_, std::string("cannot open: ") + std::strerror(errno));
    if (compression_ == Compression::gzip) {
      // 15 + 16: a zlib window of 32 KiB, gzip framing only (no zlib or raw
      // deflate streams), with the CRC-32 and length of each member checked.
      if (inflateInit2(&gz_, 15 + 16) != Z_OK) throw data_error(path_, "cannot allocate a gzip decoder");
      gz_open_ = true;
      packed_.resize(kGzipInput);
    }
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
    if (gz_open_) inflateEnd(&gz_);
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

  // Members one after another (pigz, `cat a.gz b.gz`), as gzip -d reads
  // them. zlib's gzread stops silently at bytes after a member that do not
  // start another, which hid a damaged file: here they are an error naming
  // their offset.
  size_t read_gzip(char* dst, size_t n) {
    gz_.next_out = reinterpret_cast<Bytef*>(dst);
    gz_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    const uInt wanted = gz_.avail_out;
    while (gz_.avail_out == wanted) {
      if (!member_open_) {
        // Between members: the end of the file, or the next member's magic.
        const bool two = gzip_input(2);
        if (!two && gz_.avail_in == 0) return 0;  // nothing produced in this call: the end
        if (!two || gz_.next_in[0] != 0x1f || gz_.next_in[1] != 0x8b) {
          if (packed_done_ == 0)
            throw data_error(path_, "named .gz but is not gzip-compressed (no gzip magic 1f 8b at byte 0)");
          throw gzip_trailing_garbage();
        }
        if (packed_done_ > 0 && inflateReset(&gz_) != Z_OK) throw data_error(path_, "cannot reset the gzip decoder");
        member_open_ = true;
        member_start_ = packed_done_;
      }
      if (gz_.avail_in == 0 && !gzip_input(1))
        throw data_error(path_, "gzip error: the file ends (" + std::to_string(packed_done_) +
                                    " bytes) inside the member at compressed byte offset " +
                                    std::to_string(member_start_) + " (after " +
                                    std::to_string(done_ + wanted - gz_.avail_out) +
                                    " uncompressed bytes): truncated file?");
      const uInt before = gz_.avail_in;
      const int ret = inflate(&gz_, Z_NO_FLUSH);
      packed_done_ += before - gz_.avail_in;
      if (ret == Z_STREAM_END) {
        member_open_ = false;
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        throw data_error(path_, "gzip error near compressed byte offset " + std::to_string(packed_done_) + " (after " +
                                    std::to_string(done_ + wanted - gz_.avail_out) + " uncompressed bytes): " +
                                    (gz_.msg ? gz_.msg : "error " + std::to_string(ret)) + " (corrupted file?)");
      }
    }
    return wanted - gz_.avail_out;
  }

  // At least `k` compressed bytes at gz_.next_in, reading more from the file
  // when fewer are left; false when the file ends first.
  bool gzip_input(size_t k) {
    while (gz_.avail_in < k) {
      if (gz_.avail_in > 0) std::memmove(packed_.data(), gz_.next_in, gz_.avail_in);  // a magic split over two reads
      gz_.next_in = reinterpret_cast<Bytef*>(packed_.data());
      const size_t got = read_raw(packed_.data() + gz_.avail_in, packed_.size() - gz_.avail_in);
      gz_.avail_in += static_cast<uInt>(got);
      if (got == 0) return false;
    }
    return true;
  }

  DataError gzip_trailing_garbage() const {
    return data_error(path_, "bytes after the last complete gzip member, at compressed byte offset " +
                                 std::to_string(packed_done_) + " (after " + std::to_string(done_) +
                                 " uncompressed bytes), are not another gzip member: a damaged or appended-to file? "
                                 "(gzip -t " + path_ + " reports it too)");
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

  static constexpr size_t kGzipInput = size_t{1} << 17;

  std::string path_;
  Compression compression_;
  FILE* file_ = nullptr;
  // gzip
  z_stream gz_{};
  bool gz_open_ = false;
  bool member_open_ = false;  // inside a member: the file may not end here
  int64_t member_start_ = 0;  // compressed offset of the member being read
  size_t done_ = 0;  // uncompressed bytes handed out
  // zstd
  ZSTD_DCtx* zstd_ = nullptr;
  std::vector<char> packed_;  // compressed bytes read from the file (gzip and zstd)
  ZSTD_inBuffer in_{nullptr, 0, 0};
  int64_t packed_done_ = 0;   // compressed bytes consumed (gzip and zstd)
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
