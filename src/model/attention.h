// Causal grouped-query attention with every QK-Norm variant of docs/papers.md#qk-norm-placements,
// an optional attention softcap, and optional statistics for monitoring.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "model/documents.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/sigma_reparam.h"

namespace keel {

// Per-layer attention statistics, as device tensors (no host sync until read).
struct AttentionStats {
  torch::Tensor max_score;       // max |q.k * scale| over unmasked positions, before softcap
  torch::Tensor max_score_capped;// same after the softcap (equal when no cap)
  torch::Tensor head_max_score;  // [n_heads] max score per query head, before softcap
  torch::Tensor q_norm_mean, q_norm_max;  // norms of per-head query vectors (after QK-Norm, RoPE)
  torch::Tensor k_norm_mean, k_norm_max;
  torch::Tensor entropy;         // mean attention entropy (nats) over heads and positions
  torch::Tensor first_token_mass;  // mean attention probability on the window's first token (the "sink")
};

// Bondarenko et al. 2023's clipped softmax: probabilities stretched to
// [gamma, zeta] and clipped to [0, 1], so a head can put exactly zero (or
// all) weight on a key without its logits growing without bound.
struct SoftmaxClip {
  double zeta = 1.03, gamma = -0.03;
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& cfg);
  // x: [B, T, d_model]. When `stats` is given, the blockwise path computes
  // them (model/blockwise_attention.h).
  // `docs` (data.document_mask): each query attends only its own document,
  // on every path; RoPE takes docs->positions when set.
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, AttentionStats* stats = nullptr,
                        const DocumentLayout* docs = nullptr);

  int64_t matmul_weights() const { return wq.numel() + wk.numel() + wv.numel() + wo.numel(); }  // for FLOPs
  // Scale applied to q.k (ignored for l2, where the temperature replaces it).
  double score_scale() const { return scale_; }
  // The one dispatch test: SDPA (flash, cuDNN or memory-efficient kernels)
  // unless a softcap or clamp is set, statistics are asked for, or QK-clip
  // tracks this training forward's logits; those take the blockwise path,
  // whose memory is linear in T like SDPA's. The explicit path
  // (explicit_attention) is the tests' reference only.
  bool sdpa_path(bool with_stats) const {
    return !(softcap_ || clamp_ || clip_ || with_stats || (track_head_max && torch::GradMode::is_enabled()));
  }

  // Which kernel a training forward of this shape runs: "blockwise" (softcap,
  // clamp or QK-clip) or SDPA's choice for these shapes and the current
  // priority order ("flash_attention", "cudnn_attention", "math", ...).
  // With `documents` (data.document_mask): SDPA's choice given the mask, or
  // "flash_attention_varlen" where varlen_document_attention would run.
  std::string kernel_name(int64_t batch, int64_t seq_len, torch::Device device, torch::ScalarType dtype,
                          bool documents = false) const;

  // QK-clip needs each head's largest logit of the step: while set, training
  // forwards take the blockwise path and keep the running per-head maximum of
  // |score| in head_max ([n_heads], on the device; reset it to undefined at
  // the start of a step).
  bool track_head_max = false;
  torch::Tensor head_max;
  int64_t n_heads() const { return n_heads_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }

  torch::Tensor wq, wk, wv, wo;          // [out, in]
  torch::Tensor bq, bk, bv, bo;          // undefined without model.bias
  Norm q_norm{nullptr}, k_norm{nullptr}; // QK-Norm (null when type is none)
  Norm qkv_norm{nullptr};                // model.qkv_norm: over the concatenated q, k, v outputs
  torch::Tensor temperature;             // l2: [1] or [n_heads]
  torch::Tensor softmax_beta;            // model.attn_temperature_learnable: [n_heads], scores x beta
  // model.sigma_reparam: wq_sigma ... wo_sigma (null when off).
  SigmaReparam wq_sigma{nullptr}, wk_sigma{nullptr}, wv_sigma{nullptr}, wo_sigma{nullptr};

  // The QK-Norm as forward applies it: t [B, T, heads, head_dim] through
  // q_norm or k_norm (identity where null), in t's dtype.
  torch::Tensor normalize_qk(const torch::Tensor& t, Norm& norm);

 private:
  // Masked attention takes varlen_document_attention: asked for, on CUDA, in flash's dtypes and head sizes.
  bool varlen_eligible(torch::Device device, torch::ScalarType dtype) const;
  int64_t n_heads_, n_kv_heads_, head_dim_;
  bool rope_;
  QKNormPosition qk_position_;
  int64_t q_groups_ = 1, k_groups_ = 1;  // QK-Norm: heads normalised together, n_heads/q_groups_ at a time
  double scale_;
  c10::optional<double> softcap_, clamp_;
  c10::optional<SoftmaxClip> clip_;  // model.clipped_softmax: the explicit path
};
TORCH_MODULE(Attention);

// The explicit attention on [B, H, T, D] queries and [B, Hkv, T, D]
// keys/values, materialising the [T, T] scores: the reference that SDPA and
// the blockwise path are tested against (no training forward takes it). `clamp` clips scores to [-c, c] after the softcap.
// head_max (optional): set to the per-head max |score| before cap and clamp.
// segments (optional, int64 [B, T]): the document mask of model/documents.h.
// clip (optional): the clipped softmax, clip((zeta - gamma) p + gamma, 0, 1)
// applied to the probabilities p (model.clipped_softmax); the one training
// forward that takes this path, since its rows no longer sum to 1 and no
// online-softmax kernel can form them.
torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 double scale, c10::optional<double> softcap, AttentionStats* stats,
                                 c10::optional<double> clamp = c10::nullopt, torch::Tensor* head_max = nullptr,
                                 const torch::Tensor& segments = {}, const SoftmaxClip* clip = nullptr);

// Causal attention within documents through ATen's variable-length flash
// kernel (FlashAttention-2's cu_seqlens): the batch's rows are flattened to
// one packed sequence and every document of every row is its own sequence,
// so no mask exists. q [B, H, T, D], k/v [B, Hkv, T, D] in bf16 or fp16 on
// CUDA; docs the batch's layout (its offsets are made once per forward). Returns
// [B, H, T, D]. Not yet run on a GPU: taken only with KEEL_DOCUMENT_VARLEN=1
// (document_varlen_requested) until the GPU check has (tests/gpu/test_cuda.cpp).
torch::Tensor varlen_document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const DocumentLayout& docs, double scale);
// The documents' cumulative starts over the flattened rows (int32
// [documents + 1]) and the longest document: varlen's cu_seqlens and max length.
std::pair<torch::Tensor, int64_t> document_cu_seqlens(const torch::Tensor& segments_host);
bool document_varlen_requested();

// Linear layer with an optional sigmaReparam scale on its weight.
torch::Tensor reparam_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                             const SigmaReparam& sigma);

// One projection of several: a weight, its bias (undefined: none) and σReparam (null: off).
struct LinearPart {
  torch::Tensor w, b;
  SigmaReparam sigma{nullptr};
};
// All parts applied to x as one GEMM: the weights (each with its own σReparam
// scale) are concatenated along the output dimension, so the output is
// [..., sum of out_i] in the parts' order. The parameters stay separate
// (checkpoint and Hugging Face names, per-matrix init, QK-clip's row
// scaling); autograd hands each its rows of the weight gradient as views.
torch::Tensor fused_linear(const torch::Tensor& x, const std::vector<LinearPart>& parts);

// x in the dtype matmuls run in: the autocast dtype while autocast is on for
// x's device, else x itself. A sublayer casts its input once this way, so a
// norm's fp32 output is not cast again by each linear that reads it.
torch::Tensor to_compute_dtype(const torch::Tensor& x);

// The name of an at::SDPBackend value ("flash_attention", "cudnn_attention", ...).
std::string sdpa_backend_name(int64_t backend);

double henry_temperature(int64_t seq_len);  // log2(L^2 - L), Henry et al. 2020

}  // namespace keel
