// Normalisation layers used by blocks, QK-Norm and the embedding.
#pragma once

#include <torch/torch.h>

#include <string>

#include "config/config.h"  // NormKind

namespace keel {

// Normalises over the last `dim` elements. The gain (and bias) have shape
// `param_shape`, which is [dim] for an ordinary norm or e.g. [n_heads, head_dim]
// for a QK-Norm with one gain per head; it must broadcast against the input's
// trailing dimensions. With `unit_offset` the gain is applied as (1 + weight)
// (Gemma's RMSNorm, x_hat * (1 + w) with w initialised to 0), else as weight.
class NormImpl : public torch::nn::Module {
 public:
  NormImpl(NormKind kind, int64_t dim, bool gain, bool bias, double eps,
           std::vector<int64_t> param_shape = {}, bool unit_offset = false);
  torch::Tensor forward(const torch::Tensor& x);

  NormKind kind;
  int64_t dim;
  double eps;
  bool unit_offset;
  torch::Tensor weight;  // undefined when there is no gain
  torch::Tensor bias;    // undefined when there is no bias
};
TORCH_MODULE(Norm);

// Parameter-free RMSNorm over the last dimension (modded-nanogpt's embedding norm).
torch::Tensor rms_normalize(const torch::Tensor& x, double eps);

}  // namespace keel
