// Rotary position embeddings, "rotate half" convention (GPT-NeoX, Llama, Qwen3,
// OLMo 2, Gemma in Hugging Face transformers), so exported weights need no
// permutation.
#pragma once

#include <torch/torch.h>

namespace keel {

struct RopeTables {
  torch::Tensor cos, sin;  // [T, head_dim], fp32
};

RopeTables make_rope_tables(int64_t seq_len, int64_t head_dim, double theta, torch::Device device);
// x: [B, T, heads, head_dim]. Computed in x's dtype.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& tables);

}  // namespace keel
