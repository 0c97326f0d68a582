// Gradient norms and clipping over every trained parameter, also when ZeRO-1
// shards the gradients (distributed/grad_sync.h): each rank then holds the
// reduced gradient of the parameters it owns only, so each per-parameter
// figure is taken on its owner and the others add zeros (x + 0 is exact: the
// figures equal a replicated run's bit for bit).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "optim/optimizer.h"

namespace keel {

// Which of Optimizer::params() this rank owns, and a sum over ranks (an
// all-reduce of a device tensor, in place).
struct GradShard {
  std::vector<char> owned;
  std::function<void(torch::Tensor&)> sum;
};

struct GradNorms {
  std::vector<size_t> index;  // the parameters that have a gradient, by position in params
  torch::Tensor norms;        // shape: [index.size()], their L2 norms (norm_dtype)
};

// Per-parameter gradient norms (a collective when `shard` is given).
GradNorms grad_norms(const std::vector<NamedParam>& params, const GradShard* shard = nullptr);

// Global L2 norm of all gradients, and (when max_norm > 0) scales them so the
// norm is at most max_norm. Entirely on the device: no host sync.
torch::Tensor clip_grad_norm(const std::vector<NamedParam>& params, double max_norm,
                             const GradShard* shard = nullptr);

// rows (shape: [params.size(), ...], one per parameter, computed by every
// rank from what it holds): each row from its owner. NaN rows of other ranks
// are dropped, an owner's NaN is kept. Returns rows itself without a shard.
torch::Tensor rows_from_owners(const torch::Tensor& rows, const GradShard* shard);

}  // namespace keel
