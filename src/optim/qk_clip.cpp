#include "optim/qk_clip.h"

namespace keel {

torch::Tensor qk_clip_(torch::Tensor& wq, torch::Tensor& bq, torch::Tensor& wk, torch::Tensor& bk,
                       const torch::Tensor& head_max, double tau, int64_t n_heads, int64_t n_kv_heads) {
  torch::NoGradGuard no_grad;
  const int64_t group = n_heads / n_kv_heads;
  auto hm = head_max.to(torch::kFloat32);
  auto gamma = (tau / hm.clamp_min(1e-30)).clamp_max(1.0);  // [H]
  // A non-finite logit means the step itself was bad (and skipped): no clip.
  gamma = torch::where(torch::isfinite(hm), gamma, torch::ones_like(gamma));
  auto group_min = std::get<0>(gamma.view({n_kv_heads, group}).min(1));             // [K]
  auto k_scale = group_min.sqrt();                                                  // [K]
  auto q_scale = gamma / k_scale.repeat_interleave(group);                          // [H]
  auto scale_rows = [](torch::Tensor& w, const torch::Tensor& per_head, int64_t heads) {
    if (!w.defined()) return;
    auto view = w.view({heads, -1});  // a head's rows (and bias entries) are contiguous
    view.mul_(per_head.to(w.scalar_type()).view({heads, 1}));
  };
  scale_rows(wq, q_scale, n_heads);
  scale_rows(bq, q_scale, n_heads);
  scale_rows(wk, k_scale, n_kv_heads);
  scale_rows(bk, k_scale, n_kv_heads);
  return gamma;
}

torch::Tensor qk_clip_model_(Transformer& model, double tau,
                             const std::function<void(torch::Tensor&)>& reduce_max) {
  std::vector<torch::Tensor> maxima;
  for (const auto& b : *model->blocks) {
    auto& attn = b->as<BlockImpl>()->attn;
    maxima.push_back(attn->head_max.defined()
                         ? attn->head_max.to(torch::kFloat32)
                         : torch::zeros({attn->n_heads()}, attn->wq.options().dtype(torch::kFloat32)));
  }
  auto all = torch::stack(maxima);  // [layers, heads]
  if (reduce_max) reduce_max(all);
  for (size_t i = 0; i < maxima.size(); ++i) {
    auto& attn = model->blocks[i]->as<BlockImpl>()->attn;
    qk_clip_(attn->wq, attn->bq, attn->wk, attn->bk, all[static_cast<int64_t>(i)], tau, attn->n_heads(),
             attn->n_kv_heads());
  }
  return (all > tau).sum().to(torch::kFloat32);
}

}  // namespace keel
