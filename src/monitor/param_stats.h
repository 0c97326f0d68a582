// Per-matrix optimizer statistics at monitor steps (docs/stability.md#per-matrix-statistics):
// for every trained tensor, the gradient, weight and update RMS and the
// update/weight ratio; for tensors with Adam moments, the first moment's RMS
// and how much of the second moment sits under ε (Wortsman et al. 2023,
// §3.4: as gradients shrink, √v̂ falls below ε and ε, not the gradient,
// sets the update size). One stacked device tensor, one host transfer.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <vector>

#include "optim/optimizer.h"

namespace keel {

// `before`: each parameter as it was before the update (in params() order);
// `eps`, `beta2`: AdamW's ε (after any parametrization multiplier) and β2.
// Returns {name: {grad_rms, weight_rms, update_rms, update_ratio[, m_rms]
// [, v_below_eps, v_below_10eps]}}: m_rms is Adam's first moment or Muon's
// momentum; v_below_* (Adam) are the fractions of entries with
// √v̂ = √(v / (1 - β2^t)) under ε and under 10ε; with the step recorded
// (Optimizer::record_step_stats), Muon's matrices add ns_rms, ns_sigma_max
// (the Newton–Schulz output's RMS and largest singular value) and
// update_spectral (the update's spectral norm: LR × adjustment × σ_max).
nlohmann::json param_stats(const Optimizer& optimizer, const std::vector<torch::Tensor>& before, double eps,
                           double beta2);

}  // namespace keel
