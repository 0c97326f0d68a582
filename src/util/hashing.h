// Hashes, each chosen for one job:
//   fnv1a64   document identity for the train/val split (stable, portable,
//             no seed: a document's split never depends on the run)
//   crc32     shard payload checksum (zlib; catches truncation and bit flips)
//   sha256    tokenizer identity (a .model is compared by content, not path)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace keel {

uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);
// Avalanche finalizer (splitmix64); FNV's low bits alone are poorly mixed.
uint64_t mix64(uint64_t x);
// A hash mapped to [0, 1) with 53 bits of resolution.
double unit_interval(uint64_t hash);

uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes);

std::string sha256_hex(std::string_view bytes);
std::string sha256_file(const std::string& path);  // throws DataError if unreadable

}  // namespace keel
