// QK-clip (MuonClip, Kimi K2 report 2025): after an optimizer step, every
// attention head h whose largest logit in that step, S_h, exceeded τ gets its
// query and key projections rescaled so that its logits shrink by
// γ_h = τ / S_h; heads at or below τ keep their logits.
//
// With GQA several query heads share one key head, so the split is: key head
// g is scaled by sqrt(min γ over its query heads) and query head h by
// γ_h / sqrt(that minimum). Every head's logit is then multiplied by exactly
// γ_h (1 for heads below τ); with one query head per key head (MHA) this is
// the paper's even split, √γ on each side. Biases are scaled with their rows.
// RoPE is linear, so the rescaling commutes with it. keel refuses QK-clip
// with QK-Norm, which would undo the rescaling.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "model/transformer.h"

namespace keel {

// head_max: [n_heads] max |score| per query head this step (scale applied,
// before softcap/clamp). Runs on the device without a host sync. Returns the
// per-head factor γ (1 where no clip happened).
torch::Tensor qk_clip_(torch::Tensor& wq, torch::Tensor& bq, torch::Tensor& wk, torch::Tensor& bk,
                       const torch::Tensor& head_max, double tau, int64_t n_heads, int64_t n_kv_heads);

// QK-clip over every layer of `model`, from the per-head maxima its forwards
// recorded this step (AttentionImpl::head_max; a layer with none counts as 0).
// `reduce_max` (data parallel) replaces the [layers, heads] maxima by their
// maximum over all ranks, so that every replica rescales alike. Returns how
// many heads were rescaled (a device scalar).
torch::Tensor qk_clip_model_(Transformer& model, double tau,
                             const std::function<void(torch::Tensor&)>& reduce_max = nullptr);

}  // namespace keel
