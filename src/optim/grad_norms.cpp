#include "optim/grad_norms.h"

namespace keel {

torch::Tensor rows_from_owners(const torch::Tensor& rows, const GradShard* shard) {
  if (!shard) return rows;
  TORCH_CHECK(rows.size(0) == static_cast<int64_t>(shard->owned.size()), "rows_from_owners: one row per parameter");
  std::vector<int64_t> shape(static_cast<size_t>(rows.dim()), 1);
  shape[0] = rows.size(0);
  std::vector<bool> owned(shard->owned.begin(), shard->owned.end());
  auto mask = torch::zeros({rows.size(0)}, torch::kBool);
  for (size_t i = 0; i < owned.size(); ++i) mask[static_cast<int64_t>(i)] = static_cast<bool>(owned[i]);
  auto out = torch::where(mask.to(rows.device()).view(shape), rows, torch::zeros({}, rows.options()));
  shard->sum(out);
  return out;
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
    GradShard mine{{}, shard->sum};
    for (size_t i : out.index) mine.owned.push_back(shard->owned.at(i));
    out.norms = rows_from_owners(out.norms, &mine);
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
