// One split of a prepared data directory as a single token sequence: its
// shards, memory-mapped, concatenated in manifest order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"
#include "data/shard.h"

namespace keel {

// Opens dir/entry.file and checks it against the manifest (token count,
// checksum, vocab size in the header; file size). With `deep`, also reads
// every token (CRC-32, ids below the vocab size). Throws DataError.
ShardReader open_checked_shard(const std::string& dir, const ShardEntry& entry, const DataManifest& manifest, bool deep);

class TokenStream {
 public:
  // Throws DataError when the split has no shards or a shard fails its checks.
  TokenStream(const std::string& dir, const DataManifest& manifest, const std::string& split, bool deep_verify);
  int64_t size() const { return total_; }
  // Copies tokens [begin, begin + n) as int64, across shard boundaries.
  void read(int64_t begin, int64_t n, int64_t* dst) const;

 private:
  std::vector<ShardReader> shards_;
  std::vector<int64_t> starts_;  // first stream position of each shard
  int64_t total_ = 0;
};

}  // namespace keel
