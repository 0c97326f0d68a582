// Causal grouped-query attention with every QK-Norm variant of REFERENCE.md §1,
// an optional attention softcap, and optional statistics for monitoring.
#pragma once

#include <torch/torch.h>

#include "config/config.h"
#include "model/norm.h"
#include "model/rope.h"

namespace keel {

// Per-layer attention statistics, as device tensors (no host sync until read).
struct AttentionStats {
  torch::Tensor max_score;       // max |q.k * scale| over unmasked positions, before softcap
  torch::Tensor max_score_capped;// same after the softcap (equal when no cap)
  torch::Tensor head_max_score;  // [n_heads] max score per query head, before softcap
  torch::Tensor q_norm_mean, q_norm_max;  // norms of per-head query vectors (after QK-Norm, RoPE)
  torch::Tensor k_norm_mean, k_norm_max;
  torch::Tensor entropy;         // mean attention entropy (nats) over heads and positions
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& cfg);
  // x: [B, T, d_model]. When `stats` is given, the explicit path is used and
  // the statistics are filled in.
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, AttentionStats* stats = nullptr);

  // Scale applied to q.k (ignored for l2, where the temperature replaces it).
  double score_scale() const { return scale_; }
  bool uses_fast_path() const { return !softcap_; }

  torch::Tensor wq, wk, wv, wo;          // [out, in]
  torch::Tensor bq, bk, bv, bo;          // undefined without model.bias
  Norm q_norm{nullptr}, k_norm{nullptr}; // QK-Norm (null when type is none)
  torch::Tensor temperature;             // l2: [1] or [n_heads]

 private:
  torch::Tensor normalize_qk(const torch::Tensor& t, Norm& norm);
  int64_t n_heads_, n_kv_heads_, head_dim_;
  bool rope_;
  std::string qk_type_, qk_scope_, qk_position_;
  double scale_;
  c10::optional<double> softcap_;
};
TORCH_MODULE(Attention);

// The explicit (non-fused) attention on [B, H, T, D] queries and [B, Hkv, T, D]
// keys/values; used when a softcap is set or statistics are requested, and as
// the reference the fused path is tested against.
torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 double scale, c10::optional<double> softcap, AttentionStats* stats);

double henry_temperature(int64_t seq_len);  // log2(L^2 - L), Henry et al. 2020

}  // namespace keel
