// Causal attention computed block by block (FlashAttention's online softmax,
// Dao et al. 2022; docs/papers.md#blockwise-attention): queries in blocks,
// keys and values streamed in blocks with a running maximum and sum, so no
// [T, T] tensor exists, forward or backward. The score modifiers keel needs
// are applied inside each block: the scale (or an L2 QK-Norm temperature
// already folded into q), Gemma 2's tanh softcap, the hard clamp, the causal
// mask, and grouped-query attention without repeating K and V. The backward
// recomputes each block's scores from the saved log-sum-exp (a custom
// autograd function).
//
// At no extra pass it also returns each query head's largest raw |logit|
// (before cap and clamp: what monitoring, divergence detection and QK-clip
// read), and, when asked, the statistics of the explicit path (mean entropy,
// the largest logit after the cap).
//
// Written with ATen ops over blocks, so the same code runs on the CPU and on
// CUDA. Scores are formed in the inputs' dtype and taken to fp32 for the cap,
// the softmax and the statistics; gradients accumulate in fp32.
#pragma once

#include <torch/torch.h>

namespace keel {

struct BlockwiseOptions {
  double scale = 1.0;                   // multiplies q.k (1 for l2 QK-Norm, whose temperature is in q)
  c10::optional<double> softcap;        // cap * tanh(s / cap)
  c10::optional<double> clamp;          // clip to [-clamp, clamp] after the cap
  int64_t block_q = 256, block_k = 256; // query and key rows per block
  bool head_max = false;                // fill BlockwiseResult::head_max
  bool stats = false;                   // fill entropy and max_capped (no gradient needed)
  // Intra-document masking (model/documents.h): int64 [B, T] document index
  // per position, non-decreasing along T, on q's device and on the CPU. A
  // query attends only keys of its own document; blocks whose keys all lie in
  // earlier documents than all their queries are skipped, forward and
  // backward, so the work falls with the number of documents per window.
  torch::Tensor segments, segments_host;
};

struct BlockwiseResult {
  torch::Tensor out;         // [B, H, T, D], q's dtype
  torch::Tensor head_max;    // [H] max |q.k * scale| over causal positions, before cap and clamp (fp32)
  torch::Tensor entropy;     // [] mean attention entropy in nats over batch, heads and positions (stats)
  torch::Tensor max_capped;  // [] max |logit| after cap and clamp (stats)
  torch::Tensor first_token_mass;  // [] mean probability on key 0, the window's first token (stats)
};

// The dtype the blocks compute in: autocast's when it is on for q's device
// (as SDPA gets its inputs), else the promotion of the three.
torch::ScalarType attention_dtype(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Query and key rows per block. The CPU: 128, fastest of 64 / 128 / 256 at
// T = 1024 (docs/speed.md), each block's fp32 logits small enough for the
// caches between passes. CUDA: every block is a dozen kernel launches, so
// blocks grow with T (256 up to 1024, at least T / 8) to keep a layer's
// forward and backward under 36 block pairs each up to T = 8192 instead of
// the ~500 that 128-row blocks would launch at T = 4096.
int64_t blockwise_block_size(torch::DeviceType device, int64_t seq_len);

// How many (query block, key block) pairs a causal pass visits at these block
// sizes: all when `segments_host` is undefined, else those not skipped as
// wholly in earlier documents (the work keel bench and the tests count).
int64_t blockwise_visited_blocks(int64_t seq_len, int64_t block_q, int64_t block_k,
                                 const torch::Tensor& segments_host = {});

// q: [B, H, T, D]; k, v: [B, Hkv, T, D] with H a multiple of Hkv (query head
// h reads key/value head h / (H / Hkv)). Differentiable in q, k and v.
BlockwiseResult blockwise_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const BlockwiseOptions& options);

}  // namespace keel
