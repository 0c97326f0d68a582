#include "data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"
#include "util/hashing.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "keel's shard format is little-endian and read by mapping; add byte swapping for this host"
#endif

namespace keel {

namespace {

constexpr size_t kWriteBuffer = size_t{1} << 20;

void put_u32(unsigned char* p, uint32_t v) { std::memcpy(p, &v, 4); }
void put_u64(unsigned char* p, uint64_t v) { std::memcpy(p, &v, 8); }
uint32_t get_u32(const unsigned char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
uint64_t get_u64(const unsigned char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

void encode_header(const ShardHeader& h, unsigned char* out) {
  std::memset(out, 0, kShardHeaderBytes);
  std::memcpy(out, kShardMagic, 8);
  put_u32(out + 8, h.version);
  put_u32(out + 12, h.token_bytes);
  put_u64(out + 16, h.tokens);
  put_u32(out + 24, h.crc32);
  put_u32(out + 28, h.vocab_size);
}

}  // namespace

uint32_t token_bytes_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

ShardWriter::ShardWriter(const std::string& path, int64_t vocab_size) : path_(path) {
  if (vocab_size <= 0 || vocab_size > UINT32_MAX) throw data_error(path, "invalid vocab size " + std::to_string(vocab_size));
  header_.vocab_size = static_cast<uint32_t>(vocab_size);
  header_.token_bytes = token_bytes_for_vocab(vocab_size);
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw data_error(path, "cannot create shard: " + errno_text(errno));
  ShardHeader empty;  // zero count until close(): an interrupted write never looks complete
  empty.token_bytes = header_.token_bytes;
  empty.vocab_size = header_.vocab_size;
  unsigned char h[kShardHeaderBytes];
  encode_header(empty, h);
  if (std::fwrite(h, 1, sizeof h, file_) != sizeof h) throw data_error(path, "write error: " + errno_text(errno));
  buf_.reserve(kWriteBuffer);
}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
}

void ShardWriter::append(const int32_t* ids, size_t n) {
  const uint32_t vocab = header_.vocab_size, width = header_.token_bytes;
  size_t old = buf_.size();
  buf_.resize(old + n * width);
  unsigned char* out = buf_.data() + old;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || static_cast<uint32_t>(ids[i]) >= vocab) {
      buf_.resize(old);
      throw data_error(path_, "token id " + std::to_string(ids[i]) + " outside the vocabulary [0, " +
                                  std::to_string(vocab) + ")");
    }
    if (width == 2) {
      uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(out + 2 * i, &v, 2);
    } else {
      std::memcpy(out + 4 * i, &ids[i], 4);
    }
  }
  header_.tokens += n;
  if (buf_.size() >= kWriteBuffer) flush();
}

void ShardWriter::flush() {
  if (buf_.empty()) return;
  header_.crc32 = crc32_update(header_.crc32, buf_.data(), buf_.size());
  if (std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size())
    throw data_error(path_, "write error: " + errno_text(errno));
  buf_.clear();
}

ShardHeader ShardWriter::close() {
  flush();
  unsigned char h[kShardHeaderBytes];
  encode_header(header_, h);
  if (std::fseek(file_, 0, SEEK_SET) != 0 || std::fwrite(h, 1, sizeof h, file_) != sizeof h ||
      std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0)
    throw data_error(path_, "cannot finish shard: " + errno_text(errno));
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) throw data_error(path_, "close failed: " + errno_text(errno));
  return header_;
}

ShardReader::ShardReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw data_error(path, "cannot open shard: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw data_error(path, "cannot stat shard: " + errno_text(errno));
  }
  const int64_t size = st.st_size;
  if (size < kShardHeaderBytes) {
    ::close(fd);
    throw data_error(path, "truncated shard: " + std::to_string(size) + " bytes, shorter than the " +
                               std::to_string(kShardHeaderBytes) + "-byte header");
  }
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the file open
  if (m == MAP_FAILED) throw data_error(path, "mmap failed: " + errno_text(errno));
  map_ = static_cast<const unsigned char*>(m);
  map_bytes_ = static_cast<size_t>(size);
  auto fail = [&](const std::string& msg) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    map_ = nullptr;
    throw data_error(path, msg);
  };
  if (std::memcmp(map_, kShardMagic, 8) != 0) fail("not a keel token shard (bad magic at byte offset 0)");
  header_.version = get_u32(map_ + 8);
  header_.token_bytes = get_u32(map_ + 12);
  header_.tokens = get_u64(map_ + 16);
  header_.crc32 = get_u32(map_ + 24);
  header_.vocab_size = get_u32(map_ + 28);
  if (header_.version != kShardVersion)
    fail("shard format version " + std::to_string(header_.version) + " (byte offset 8); this keel reads version " +
         std::to_string(kShardVersion));
  if (header_.token_bytes != 2 && header_.token_bytes != 4)
    fail("invalid bytes per token " + std::to_string(header_.token_bytes) + " at byte offset 12 (expected 2 or 4)");
  const uint64_t expect = kShardHeaderBytes + header_.tokens * header_.token_bytes;
  if (header_.tokens > (uint64_t{1} << 48) || expect != static_cast<uint64_t>(size))
    fail("size mismatch: the header (byte offset 16) promises " + std::to_string(header_.tokens) + " tokens = " +
         std::to_string(expect) + " bytes, the file has " + std::to_string(size) + " (truncated or partly written?)");
  ::madvise(const_cast<unsigned char*>(map_), map_bytes_, MADV_RANDOM);  // windows are read in random order
}

ShardReader::~ShardReader() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)), header_(o.header_), map_(o.map_), map_bytes_(o.map_bytes_) {
  o.map_ = nullptr;
  o.map_bytes_ = 0;
}

void ShardReader::verify() const {
  const unsigned char* tokens = map_ + kShardHeaderBytes;
  const size_t bytes = map_bytes_ - kShardHeaderBytes;
  uint32_t crc = crc32_update(0, tokens, bytes);
  if (crc != header_.crc32) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "checksum mismatch: CRC-32 of the tokens is %08x, the header says %08x "
                  "(corrupted file)", crc, header_.crc32);
    throw data_error(path_, msg);
  }
  // First id not below the vocab size, or tokens() when all are valid.
  auto first_bad = [&](const auto* p) {
    for (uint64_t i = 0; i < header_.tokens; ++i)
      if (p[i] >= header_.vocab_size) return i;
    return header_.tokens;
  };
  uint64_t bad = header_.token_bytes == 2 ? first_bad(reinterpret_cast<const uint16_t*>(tokens))
                                          : first_bad(reinterpret_cast<const uint32_t*>(tokens));
  if (bad < header_.tokens) {
    int64_t id = header_.token_bytes == 2 ? reinterpret_cast<const uint16_t*>(tokens)[bad]
                                          : reinterpret_cast<const uint32_t*>(tokens)[bad];
    throw data_error(path_, "token id " + std::to_string(id) + " at token " + std::to_string(bad) +
                                " (byte offset " + std::to_string(kShardHeaderBytes + bad * header_.token_bytes) +
                                ") is not below the vocab size " + std::to_string(header_.vocab_size));
  }
}

void ShardReader::read(int64_t begin, int64_t n, int64_t* dst) const {
  const unsigned char* tokens = map_ + kShardHeaderBytes;
  if (header_.token_bytes == 2) {
    const auto* p = reinterpret_cast<const uint16_t*>(tokens) + begin;
    for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
  } else {
    const auto* p = reinterpret_cast<const uint32_t*>(tokens) + begin;
    for (int64_t i = 0; i < n; ++i) dst[i] = p[i];
  }
}

}  // namespace keel
