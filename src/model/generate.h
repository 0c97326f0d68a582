// Autoregressive sampling for `keel sample`: temperature, top-k, a seeded
// generator (same seed, same text). Recomputes the whole context each token;
// fine for the small models keel trains.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"

namespace keel {

struct SampleOptions {
  int64_t max_new_tokens = 100;
  double temperature = 0.8;   // 0: greedy
  int64_t top_k = 50;         // 0: all tokens
  uint64_t seed = 1;
  int64_t stop_id = -1;       // stop when this id is produced (EOS); -1: never
};

std::vector<int64_t> generate(Transformer& model, const std::vector<int64_t>& prompt, const SampleOptions& options);

}  // namespace keel
