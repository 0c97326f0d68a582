// Token shard files: a 64-byte header, then the tokens, little-endian.
//
//   offset  size  field
//        0     8  magic "KEELTOK\0"
//        8     4  format version (u32) = 1
//       12     4  bytes per token (u32): 2 (uint16) or 4 (uint32)
//       16     8  token count (u64)
//       24     4  CRC-32 (zlib) of the token bytes (u32)
//       28     4  vocab size of the tokenizer that made them (u32)
//       32    32  reserved, zero
//       64     -  tokens
//
// The manifest repeats count and checksum, so a shard whose header was
// damaged is caught by the comparison even where the header still parses.
// Offsets keep tokens naturally aligned, so a mapped file is a token array.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace keel {

constexpr char kShardMagic[8] = {'K', 'E', 'E', 'L', 'T', 'O', 'K', '\0'};
constexpr uint32_t kShardVersion = 1;
constexpr int64_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t tokens = 0;
  uint32_t crc32 = 0;
  uint32_t vocab_size = 0;
};

// 2 when every id < vocab_size fits in uint16, else 4.
uint32_t token_bytes_for_vocab(int64_t vocab_size);

// Streams tokens into one shard file; close() writes the final header and
// fsyncs. Destroying an unclosed writer leaves a file with a zero header
// (count 0, which the reader rejects against its size): never "complete".
class ShardWriter {
 public:
  ShardWriter(const std::string& path, int64_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const int32_t* ids, size_t n);  // throws DataError on an id outside [0, vocab)
  ShardHeader close();
  int64_t tokens() const { return static_cast<int64_t>(header_.tokens); }
  const std::string& path() const { return path_; }

 private:
  void flush();
  std::string path_;
  FILE* file_ = nullptr;
  ShardHeader header_;
  std::vector<unsigned char> buf_;
};

// A read-only memory-mapped shard. The constructor checks the header and the
// file size; verify() also reads every token (checksum, ids < vocab size).
class ShardReader {
 public:
  explicit ShardReader(const std::string& path);
  ~ShardReader();
  ShardReader(ShardReader&&) noexcept;
  ShardReader& operator=(ShardReader&&) = delete;
  ShardReader(const ShardReader&) = delete;

  const ShardHeader& header() const { return header_; }
  int64_t size() const { return static_cast<int64_t>(header_.tokens); }
  const std::string& path() const { return path_; }
  // Throws DataError naming the file (and the offending offset for ids).
  void verify() const;
  // Copies tokens [begin, begin + n) into dst as int64.
  void read(int64_t begin, int64_t n, int64_t* dst) const;

 private:
  std::string path_;
  ShardHeader header_;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace keel
