// Weight initialisation, separate from construction (torchtitan/OLMo-core):
// build the model, then call init_weights with a seed. The same seed gives the
// same weights on any device, because values are drawn on the CPU.
#pragma once

#include "config/config.h"
#include "model/transformer.h"

namespace keel {

void init_weights(Transformer& model, const ModelConfig& cfg, uint64_t seed);
// Construct + init, on `device`.
Transformer build_model(const ModelConfig& cfg, uint64_t seed, torch::Device device = torch::kCPU);

}  // namespace keel
