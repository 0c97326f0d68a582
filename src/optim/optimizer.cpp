#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "optim/muon.h"
#include "util/error.h"
#include "util/log.h"

namespace keel {

bool wants_weight_decay(const std::string& name, const TrainConfig& t) {
  const std::string leaf = name.substr(name.rfind('.') + 1);
  if (name.find("norm") != std::string::npos) return false;  // norm gains and biases
  if (leaf.size() >= 4 && leaf.compare(leaf.size() - 4, 4, "bias") == 0) return false;
  if (leaf == "temperature" || leaf == "softmax_beta") return false;  // attention temperatures
  if (leaf == "attn_layer_scale" || leaf == "mlp_layer_scale") return false;  // LayerScale gains, like norm gains
  if (leaf == "wte") return t.decay_embeddings;
  return true;
}

AdamW::AdamW(std::vector<NamedParam> params, const TrainConfig& t) : cfg_(t) {
  params_ = std::move(params);
  // Wortsman et al. 2023's independent decay: the decay follows the schedule's
  // shape (lr / peak_lr) but not its magnitude, so pass wd / peak_lr.
  const double wd = t.independent_weight_decay ? t.weight_decay / t.lr : t.weight_decay;
  // Decayed parameters first, then the rest; within each, one group per
  // (LR multiplier, decay) pair in first-seen order (µP's matrix-like groups).
  for (const bool decayed : {true, false}) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (wants_weight_decay(params_[i].name, t) != decayed) continue;
      const double group_wd = decayed ? wd * params_[i].wd_mult : 0.0;
      auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
        return g.decayed == decayed && g.weight_decay == group_wd && g.lr_mult == params_[i].lr_mult;
      });
      if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{{}, group_wd, params_[i].lr_mult, decayed});
      it->index.push_back(i);
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& p = params_[i].param;
    exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    // The fused kernel wants per-parameter float32 step counters on the device.
    steps_.push_back(torch::zeros({}, p.options().dtype(torch::kFloat32)));
  }
  fused_ = t.optimizer_impl != OptimizerImpl::reference;
}

void Optimizer::zero_grad() {
  for (auto& p : params_)
    if (p.param.grad().defined()) p.param.mutable_grad() = torch::Tensor();
}

void AdamW::step(const torch::Tensor& lr, const torch::Tensor& found_inf) {
  if (!fused_) return step(lr.item<double>(), found_inf);
  torch::NoGradGuard no_grad;
  for (const auto& g : groups_) step_fused(g, 0.0, g.lr_mult == 1.0 ? lr : lr * g.lr_mult, found_inf);
}

void AdamW::step(double lr, const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  for (const auto& g : groups_) {
    if (fused_) {
      step_fused(g, lr * g.lr_mult, torch::Tensor(), found_inf);
    } else {
      if (found_inf.defined() && found_inf.item<float>() != 0.0f) return;  // reference path syncs
      step_reference(g, lr * g.lr_mult);
    }
  }
}

void AdamW::step_fused(const Group& g, double lr, const torch::Tensor& lr_tensor, const torch::Tensor& found_inf) {
  std::vector<torch::Tensor> p, grads, m, v, steps;
  for (size_t i : g.index) {
    if (!params_[i].param.grad().defined()) continue;
    p.push_back(params_[i].param);
    grads.push_back(params_[i].param.grad());
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
    steps.push_back(steps_[i]);
  }
  if (p.empty()) return;
  // Step counters are incremented before the call (docs/papers.md#libtorch-notes); a skipped
  // step (found_inf = 1) takes the increment back, still without a sync.
  if (found_inf.defined()) torch::_foreach_add_(steps, 1.0 - found_inf);
  else torch::_foreach_add_(steps, 1.0);
  c10::optional<at::Tensor> inf = found_inf.defined() ? c10::optional<at::Tensor>(found_inf) : c10::nullopt;
  if (lr_tensor.defined())
    at::_fused_adamw_(p, grads, m, v, {}, steps, lr_tensor, cfg_.beta1, cfg_.beta2, g.weight_decay, cfg_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, c10::nullopt, inf);
  else
    at::_fused_adamw_(p, grads, m, v, {}, steps, lr, cfg_.beta1, cfg_.beta2, g.weight_decay, cfg_.eps,
                      /*amsgrad=*/false, /*maximize=*/false, c10::nullopt, inf);
}

void AdamW::step_reference(const Group& g, double lr) {
  const double b1 = cfg_.beta1, b2 = cfg_.beta2;
  for (size_t i : g.index) {
    auto& p = params_[i].param;
    if (!p.grad().defined()) continue;
    const auto& grad = p.grad();
    steps_[i].add_(1.0);
    const double t = steps_[i].item<double>();
    p.mul_(1.0 - lr * g.weight_decay);                       // decoupled decay
    exp_avg_[i].lerp_(grad, 1.0 - b1);                       // m = b1 m + (1-b1) g
    exp_avg_sq_[i].mul_(b2).addcmul_(grad, grad, 1.0 - b2);  // v = b2 v + (1-b2) g^2
    const double bias1 = 1.0 - std::pow(b1, t), bias2 = 1.0 - std::pow(b2, t);
    auto denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias2)).add_(cfg_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bias1);
  }
}

std::vector<std::string> AdamW::describe() const {
  return {strf("%s AdamW on all %zu tensors, betas (%g, %g), eps %g, weight decay %g%s", fused_ ? "fused" : "reference",
               params_.size(), cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay,
               cfg_.independent_weight_decay ? " (independent of the LR)" : "")};
}

std::unique_ptr<Optimizer> make_optimizer(std::vector<NamedParam> params, const TrainConfig& t, int64_t head_dim) {
  if (t.optimizer == OptimizerKind::muon) return std::make_unique<Muon>(std::move(params), t, head_dim);
  return std::make_unique<AdamW>(std::move(params), t);
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("exp_avg." + params_[i].name, exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + params_[i].name, exp_avg_sq_[i]);
    out.emplace_back("step." + params_[i].name, steps_[i]);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  auto take = [&](const std::string& key, torch::Tensor& dst) {
    auto it = by_name.find(key);
    if (it == by_name.end()) throw CheckpointError("optimizer state has no entry '" + key + "'");
    if (it->second.sizes() != dst.sizes())
      throw CheckpointError("optimizer state '" + key + "' has the wrong shape");
    dst.copy_(it->second);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    take("exp_avg." + params_[i].name, exp_avg_[i]);
    take("exp_avg_sq." + params_[i].name, exp_avg_sq_[i]);
    take("step." + params_[i].name, steps_[i]);
  }
}

std::string AdamW::graph_capture_obstacle() const {
  return fused_ ? "" : "train.optimizer_impl: reference reads the learning rate on the host every step";
}

}  // namespace keel
