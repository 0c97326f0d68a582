// Parameter counts and training FLOPs per token, from the config alone
// (closed form; a test checks them against the built model).
#pragma once

#include <string>

#include "config/config.h"

namespace keel {

struct ModelSize {
  int64_t total = 0;         // every trainable parameter (tied head counted once)
  int64_t embedding = 0;     // token embedding table
  int64_t head = 0;          // untied output head (0 when tied)
  int64_t matmul = 0;        // weights used in matmuls: all but the embedding lookup, head always counted
  double flops_per_token = 0;// 6*matmul + 12*L*H*Q*T (REFERENCE.md §7)
};

ModelSize model_size(const ModelConfig& cfg, int64_t seq_len);
// One line stating the FLOP convention, printed next to any MFU figure.
std::string flops_convention();

}  // namespace keel
