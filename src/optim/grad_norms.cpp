#include "optim/grad_norms.h"

#include <atomic>

namespace keel {

namespace {

std::atomic<int64_t> mask_uploads{0};

// Keeps row i where owned[i] (one flag per row), zeroes the others, and sums over ranks.
torch::Tensor keep_owned_rows(const torch::Tensor& rows, std::vector<char> owned, const GradShard& shard) {
  TORCH_CHECK(rows.size(0) == static_cast<int64_t>(owned.size()), "rows_from_owners: one row per parameter");
  std::vector<int64_t> shape(static_cast<size_t>(rows.dim()), 1);
  shape[0] = rows.size(0);
  auto& cache = shard.mask_cache;
  if (!cache.mask.defined() || cache.flags != owned || cache.mask.device() != rows.device()) {
    ++mask_uploads;
    cache.mask = torch::from_blob(owned.data(), {rows.size(0)}, torch::kUInt8).to(rows.device(), torch::kBool);
    cache.flags = std::move(owned);
  }
  auto out = torch::where(cache.mask.view(shape), rows, torch::zeros({}, rows.options()));
  shard.sum(out);
  return out;
}

}  // namespace

int64_t owner_mask_uploads() { return mask_uploads.load(); }

torch::Tensor rows_from_owners(const torch::Tensor& rows, const GradShard* shard) {
  return shard ? keep_owned_rows(rows, shard->owned, *shard) : rows;
}

GradNorms grad_norms(const std::vector<NamedParam>& params, const GradShard* shard) {
  torch::NoGradGuard no_grad;
  GradNorms out;
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].param.grad().defined()) {
      out.index.push_back(i);
      grads.push_back(params[i].param.grad());
    }
  if (grads.empty()) return out;
  out.norms = torch::stack(torch::_foreach_norm(grads, 2.0, norm_dtype(grads)));
  if (shard) {
    std::vector<char> owned;
    for (size_t i : out.index) owned.push_back(shard->owned.at(i));
    out.norms = keep_owned_rows(out.norms, std::move(owned), *shard);
  }
  return out;
}

torch::Tensor clip_grad_norm(const std::vector<NamedParam>& params, double max_norm, const GradShard* shard) {
  torch::NoGradGuard no_grad;
  const GradNorms g = grad_norms(params, shard);
  if (g.index.empty()) return torch::zeros({});
  auto total = g.norms.norm(2.0);
  if (max_norm > 0) {
    std::vector<torch::Tensor> grads;
    for (size_t i : g.index) grads.push_back(params[i].param.grad());
    // min(1, max_norm / (norm + 1e-6)) as a device tensor (torch's clip_grad_norm_ formula).
    auto coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    torch::_foreach_mul_(grads, coef);
  }
  return total;
}

}  // namespace keel
