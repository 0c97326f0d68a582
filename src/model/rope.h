// Rotary position embeddings, "rotate half" convention (GPT-NeoX, Llama, Qwen3,
// OLMo 2, Gemma in Hugging Face transformers), so exported weights need no
// permutation.
#pragma once

#include <torch/torch.h>

namespace keel {

struct RopeTables {
  torch::Tensor cos, sin;  // [T, head_dim], fp32
  // sin with its first half negated: rotate_half(x) * sin == roll(x, D/2) * sin_signed,
  // so the composite needs no neg and no cat (and its backward no zero-filled slices).
  torch::Tensor sin_signed;
  // cos and sin_signed in another dtype (the autocast compute dtype), made once per
  // forward by with_dtype() rather than in every layer; undefined when not needed.
  torch::Tensor cos_lowp, sin_signed_lowp;

  // These tables plus copies of the first T rows in `dtype` (none when fp32).
  RopeTables with_dtype(int64_t T, torch::ScalarType dtype) const;
};

RopeTables make_rope_tables(int64_t seq_len, int64_t head_dim, double theta, torch::Device device);
// x: [B, T, heads, head_dim], any strides with a dense last dimension. Computed
// in x's dtype: on the CPU by one fused kernel (fused_ops.h), elsewhere as
// x * cos + roll(x, D/2) * sin_signed (four kernels; three in the backward plus
// the accumulation).
// positions (optional, int64 [B, T]): each token's own position instead of
// its index in the window (data.reset_positions: positions restart at each
// document); the composite path with the tables gathered per token.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& tables, const torch::Tensor& positions = {});

}  // namespace keel
