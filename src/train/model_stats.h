// Attention and output-logit statistics for monitoring (docs/papers.md#spike-and-divergence-signals):
// per layer the max |attention logit| before and after the softcap, q/k norms
// and attention entropy; for the output head max |logit|, mean log Z and the
// z-loss value. Computed by a separate no-grad forward on a few sequences, so
// the training step's numerics are untouched.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/transformer.h"

namespace keel {

// inputs: [B, T] token ids on the model's device. Syncs with the host once.
nlohmann::json collect_model_stats(Transformer& model, const torch::Tensor& inputs, bool bf16_autocast);

// Global L2 norm of all parameters.
double parameter_norm(Transformer& model);

}  // namespace keel
