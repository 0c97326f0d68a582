#include "model/model_size.h"

namespace keel {

ModelSize model_size(const TransformerImpl& m, int64_t T) {
  const ModelConfig& c = m.config();
  ModelSize s;
  for (const auto& p : m.parameters()) s.total += p.numel();  // a tied head is one tensor, listed once
  s.embedding = m.wte.numel();
  s.head = c.tie_embeddings ? 0 : m.lm_head.numel();
  s.matmul = m.lm_head.numel();  // the output head is a matmul, tied or not
  for (const auto& b : *m.blocks) {
    const auto* block = b->as<BlockImpl>();
    s.matmul += block->attn->matmul_weights() + block->mlp->matmul_weights();
  }
  s.flops_per_token = 6.0 * static_cast<double>(s.matmul) + 12.0 * static_cast<double>(c.n_layers) *
                                                               static_cast<double>(c.n_heads) *
                                                               static_cast<double>(c.head_dim()) *
                                                               static_cast<double>(T);
  return s;
}

ModelSize model_size(const ModelConfig& cfg, int64_t T) {
  torch::NoGradGuard no_grad;
  Transformer model(cfg);
  return model_size(*model, T);
}

std::string flops_convention() {
  return "FLOPs/token = 6*N + 12*L*H*Q*T, N = weights used in matmuls (output head included, "
         "embedding lookup excluded), attention term not halved for causal masking";
}

}  // namespace keel
