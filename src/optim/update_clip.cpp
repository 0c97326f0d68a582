#include "optim/update_clip.h"

#include "optim/grad_norms.h"

namespace keel {

torch::Tensor clip_update(const std::vector<NamedParam>& params, const std::vector<torch::Tensor>& before,
                          double max_norm, bool per_param) {
  torch::NoGradGuard no_grad;
  TORCH_CHECK(params.size() == before.size(), "clip_update: one saved tensor per parameter");
  std::vector<torch::Tensor> live, update = before;
  for (const auto& p : params) live.push_back(p.param.detach());
  if (live.empty()) return torch::zeros({});
  torch::_foreach_sub_(update, live);  // before - after = -u
  auto norms = torch::stack(torch::_foreach_norm(update, 2.0, norm_dtype(update)));
  auto total = norms.norm();
  if (max_norm > 0) {
    // min(1, max / (norm + 1e-6)), as torch's clip_grad_norm_; 1 leaves the update as it was.
    auto scale = per_param ? (max_norm / (norms + 1e-6)).clamp_max(1.0) : (max_norm / (total + 1e-6)).clamp_max(1.0);
    auto shrink = 1.0 - scale;  // theta = after + (1 - scale) (before - after)
    if (per_param) {
      auto each = shrink.unbind(0);
      for (size_t i = 0; i < live.size(); ++i) live[i].add_(update[i] * each[i].to(update[i].scalar_type()));
    } else {
      torch::_foreach_mul_(update, shrink.to(update.front().scalar_type()));
      torch::_foreach_add_(live, update);
    }
  }
  return total;
}

}  // namespace keel
