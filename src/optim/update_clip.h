// train.update_clip: clip the update the optimizer made, not the gradient
// (levanter's clip_update_norm; docs/papers.md#update-clipping). With the
// weights before the step kept aside, the update u = theta_after -
// theta_before is scaled to norm at most `max_norm`, globally (one norm over
// every parameter, as gradient clipping) or per parameter, and theta_after =
// theta_before + scale u. Works after any optimizer (AdamW, Muon, ZeRO-1's
// broadcast included: every rank holds the whole update then). Entirely on
// the device: no host sync.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "optim/optimizer.h"

namespace keel {

// Clips the update of `params` (whose values before the step are `before`,
// in the same order) in place. Returns the global norm of the update before
// clipping, a device scalar.
torch::Tensor clip_update(const std::vector<NamedParam>& params, const std::vector<torch::Tensor>& before,
                          double max_norm, bool per_param);

}  // namespace keel
