#include "data/token_stream.h"

#include <algorithm>
#include <cstdio>

#include "util/error.h"

namespace keel {

ShardReader open_checked_shard(const std::string& dir, const ShardEntry& e, const DataManifest& m, bool deep) {
  ShardReader r(dir + "/" + e.file);
  const auto& h = r.header();
  auto mismatch = [&](const std::string& what, const std::string& header, const std::string& manifest) {
    return data_error(r.path(), what + " mismatch: the shard header says " + header + ", " + dir + "/" +
                                    kDataManifestFile + " says " + manifest + " (corrupted or replaced file?)");
  };
  if (static_cast<int64_t>(h.tokens) != e.tokens)
    throw mismatch("token count", std::to_string(h.tokens), std::to_string(e.tokens));
  if (h.crc32 != e.crc32) {
    char a[16], b[16];
    std::snprintf(a, sizeof a, "%08x", h.crc32);
    std::snprintf(b, sizeof b, "%08x", e.crc32);
    throw mismatch("checksum", a, b);
  }
  if (static_cast<int64_t>(h.vocab_size) != m.tokenizer.vocab_size)
    throw mismatch("vocab size", std::to_string(h.vocab_size), std::to_string(m.tokenizer.vocab_size));
  if (h.token_bytes != (m.dtype == "uint16" ? 2u : 4u))
    throw mismatch("token width", std::to_string(h.token_bytes) + " bytes", m.dtype);
  if (deep) r.verify();
  return r;
}

TokenStream::TokenStream(const std::string& dir, const DataManifest& m, const std::string& split, bool deep) {
  for (const auto& e : m.shards) {
    if (e.split != split) continue;
    shards_.push_back(open_checked_shard(dir, e, m, deep));
    starts_.push_back(total_);
    total_ += shards_.back().size();
  }
  if (split != "train" && split != "val") throw DataError("unknown split '" + split + "' (train or val)");
  if (total_ == 0)
    throw DataError(dir + ": the " + split + " split has no tokens" +
                    (split == "val" ? " (data.val_fraction = 0, or too few documents to hold any out)" : ""));
}

void TokenStream::read(int64_t begin, int64_t n, int64_t* dst) const {
  if (begin < 0 || n < 0 || begin + n > total_)
    throw std::out_of_range("TokenStream::read [" + std::to_string(begin) + ", " + std::to_string(begin + n) +
                            ") outside [0, " + std::to_string(total_) + ")");
  // Last shard starting at or before `begin`.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  while (n > 0) {
    int64_t local = begin - starts_[s];
    int64_t take = std::min(n, shards_[s].size() - local);
    shards_[s].read(local, take, dst);
    dst += take;
    begin += take;
    n -= take;
    ++s;
  }
}

}  // namespace keel
