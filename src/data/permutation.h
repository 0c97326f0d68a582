// A pseudo-random permutation of [0, n) evaluated one index at a time.
//
// The loader needs "the k-th window of epoch e" as a pure function of
// (seed, e, k). Materializing a shuffled array per epoch costs 8 bytes per
// window and a cache; a keyed Feistel network on the smallest power-of-4
// domain >= n, with cycle walking back into [0, n), is a bijection computed
// in O(1) memory (a handful of hashes per index on average) and identical on
// every platform (no std::uniform_int_distribution, whose algorithm is
// implementation-defined).
#pragma once

#include <cstdint>

namespace keel {

class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;  // i in [0, n)
  uint64_t size() const { return n_; }

 private:
  uint64_t encrypt(uint64_t x) const;
  uint64_t n_;
  uint64_t key_;
  int half_bits_;   // the domain is 2^(2 * half_bits_)
  uint64_t mask_;   // low half_bits_ bits
};

}  // namespace keel
