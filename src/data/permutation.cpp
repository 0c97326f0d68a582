#include "data/permutation.h"

#include <stdexcept>

#include "util/hashing.h"

namespace keel {

namespace {
constexpr int kRounds = 6;  // >= 4 rounds make a Feistel network a strong PRP (Luby-Rackoff)
}

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n), key_(mix64(key)) {
  if (n == 0) throw std::invalid_argument("Permutation of an empty range");
  half_bits_ = 1;
  while (half_bits_ < 32 && (uint64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t Permutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & mask_;
  for (int r = 0; r < kRounds; ++r) {
    uint64_t f = mix64(right ^ (key_ + static_cast<uint64_t>(r) * 0x9e3779b97f4a7c15ULL)) & mask_;
    uint64_t next = left ^ f;
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t i) const {
  if (i >= n_) throw std::out_of_range("Permutation index out of range");
  // Cycle walking: the domain is < 4n, so on average < 4 steps.
  uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

}  // namespace keel
