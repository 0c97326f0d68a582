#include "model/model_size.h"

namespace keel {

static int64_t norm_params(const ModelConfig& c) {
  return c.d_model * ((c.norm == "layernorm" && c.bias) ? 2 : 1);
}

static int64_t qk_norm_params(const ModelConfig& c) {
  const auto& q = c.qk_norm;
  const int64_t D = c.head_dim(), H = c.n_heads, K = c.n_kv_heads;
  int64_t n = 0;
  if (q.type != "none") {
    int64_t per_vector = 0;
    if (q.scope == "projection") per_vector = (H + K) * D;
    else per_vector = q.gain_per_head ? (H + K) * D : 2 * D;
    int64_t copies = (q.gain ? 1 : 0) + ((q.type == "layernorm" && q.bias) ? 1 : 0);
    n += per_vector * copies;
  }
  if (q.type == "l2" && q.temperature_learnable) n += q.temperature_per_head ? H : 1;
  return n;
}

ModelSize model_size(const ModelConfig& c, int64_t T) {
  const int64_t C = c.d_model, D = c.head_dim(), H = c.n_heads, K = c.n_kv_heads, F = c.ffn_dim();
  const int64_t V = c.padded_vocab(), L = c.n_layers;
  const int64_t attn = C * H * D + 2 * C * K * D + H * D * C + (c.bias ? H * D + 2 * K * D + C : 0);
  const bool gated = c.mlp != "gelu";  // swiglu, geglu_tanh: gate, up and down matrices
  const int64_t mlp = (gated ? 3 : 2) * C * F + (c.bias ? (gated ? 2 : 1) * F + C : 0);
  const int64_t norms = norm_params(c) * (c.norm_placement == "sandwich" ? 4 : 2);
  const int64_t per_layer = attn + mlp + norms + qk_norm_params(c);

  ModelSize s;
  s.embedding = V * C;
  s.head = c.tie_embeddings ? 0 : V * C;
  const int64_t final_norm = c.norm_placement == "post" ? 0 : norm_params(c);
  // The embedding norm is always a LayerNorm (bias with model.bias), whatever model.norm is.
  const int64_t embed_norm = c.embed_norm == "layernorm" ? c.d_model * (c.bias ? 2 : 1) : 0;
  s.total = s.embedding + s.head + L * per_layer + final_norm + embed_norm;
  const int64_t matmul_per_layer = C * H * D + 2 * C * K * D + H * D * C + (gated ? 3 : 2) * C * F;
  s.matmul = L * matmul_per_layer + V * C;
  s.flops_per_token = 6.0 * static_cast<double>(s.matmul) +
                      12.0 * static_cast<double>(L) * static_cast<double>(H) * static_cast<double>(D) *
                          static_cast<double>(T);
  return s;
}

std::string flops_convention() {
  return "FLOPs/token = 6*N + 12*L*H*Q*T, N = weights used in matmuls (output head included, "
         "embedding lookup excluded), attention term not halved for causal masking";
}

}  // namespace keel
