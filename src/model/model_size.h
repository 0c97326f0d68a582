// Parameter counts and training FLOPs per token, counted on the built model
// (each module counts its own matmul weights), so every knob that adds a
// parameter is counted without a second description of the architecture.
#pragma once

#include <string>

#include "model/transformer.h"

namespace keel {

struct ModelSize {
  int64_t total = 0;         // every trainable parameter (tied head counted once)
  int64_t embedding = 0;     // token embedding table
  int64_t head = 0;          // untied output head (0 when tied)
  int64_t matmul = 0;        // weights used in matmuls: all but the embedding lookup, head always counted
  double flops_per_token = 0;// 6*matmul + 12*L*H*Q*T (docs/papers.md#throughput-and-mfu)
};

ModelSize model_size(const TransformerImpl& model, int64_t seq_len);
// The same for a config: builds the model's parameters without initialising
// them (allocated, never touched, so even a large model costs no memory).
ModelSize model_size(const ModelConfig& cfg, int64_t seq_len);
// One line stating the FLOP convention, printed next to any MFU figure.
std::string flops_convention();

}  // namespace keel
