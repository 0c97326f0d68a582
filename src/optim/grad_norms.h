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
  // The owner mask on the device, made once: a host-to-device copy from
  // pageable memory makes the host wait for the stream, so one per step was
  // a sync per step under ZeRO-1. Rebuilt only when the flags or the device change.
  struct MaskCache {
    std::vector<char> flags;
    torch::Tensor mask;
  };
  mutable MaskCache mask_cache;
};

// How many owner masks were copied to a device since the process started:
// the tests count them per step (none after the first).
int64_t owner_mask_uploads();

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
