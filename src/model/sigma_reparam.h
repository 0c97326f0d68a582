// σReparam (Zhai et al. 2023, "Stabilizing Transformer Training by
// Preventing Attention Entropy Collapse"): a linear layer uses
//   Ŵ = (γ / σ(W)) · W
// where σ(W) is the largest singular value of W, estimated as uᵀWv with
// persistent vectors u, v refined by one power-iteration step per training
// step, and γ is a learnable scalar. keel initialises γ to 1 (the paper's
// "γ initialised to 1"; the alternative, γ = σ(W) at init, would start from
// exactly the unreparametrised layer). u and v are buffers, so checkpoints
// carry them and a resumed run continues the same iteration.
#pragma once

#include <torch/torch.h>

namespace keel {

class SigmaReparamImpl : public torch::nn::Module {
 public:
  SigmaReparamImpl(int64_t out_features, int64_t in_features);

  // γ / σ(W) as a 0-d tensor, differentiable in W and γ (σ = uᵀWv with u, v
  // held fixed, as in the paper's implementation).
  torch::Tensor scale(const torch::Tensor& w) const;
  // One power-iteration step on u and v (no gradient): v ← Wᵀu/|Wᵀu|,
  // u ← Wv/|Wv|.
  void power_step(const torch::Tensor& w);
  // σ(W) estimate with the current vectors.
  torch::Tensor sigma(const torch::Tensor& w) const;

  torch::Tensor u;      // [out]
  torch::Tensor v;      // [in]
  torch::Tensor gamma;  // [] learnable
};
TORCH_MODULE(SigmaReparam);

// Unit-norm starting vectors for u and v, from `generator`-free seeded
// values (weight init calls it; see model/init.cpp).
void init_sigma_reparam(SigmaReparamImpl& s, uint64_t seed);

// One power-iteration step for every σReparam layer in `model` (the trainer
// calls it once per optimizer step, before the forward).
void sigma_reparam_power_step(torch::nn::Module& model);

}  // namespace keel
