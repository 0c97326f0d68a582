#include "train/weight_ema.h"

#include "util/error.h"

namespace keel {

WeightEma::WeightEma(std::vector<NamedParam> params, double decay) : params_(std::move(params)), decay_(decay) {}

void WeightEma::update() {
  torch::NoGradGuard no_grad;
  if (!started_) {
    for (const auto& p : params_) average_.push_back(p.param.detach().clone());
    started_ = true;
    return;
  }
  std::vector<torch::Tensor> live;
  for (const auto& p : params_) live.push_back(p.param.detach());
  // average + (1 - b) (live - average) = b average + (1 - b) live
  torch::_foreach_lerp_(average_, live, 1.0 - decay_);
}

int64_t WeightEma::numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p.param.numel();
  return n;
}

std::vector<std::pair<std::string, torch::Tensor>> WeightEma::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < average_.size(); ++i) out.emplace_back(params_[i].name, average_[i]);
  return out;
}

void WeightEma::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& tensors, const std::string& file) {
  std::vector<torch::Tensor> loaded;
  for (const auto& p : params_) {
    const torch::Tensor* found = nullptr;
    for (const auto& [name, t] : tensors)
      if (name == p.name) found = &t;
    if (!found) throw CheckpointError(file + ": no tensor '" + p.name + "' (train.ema_decay on a different model?)");
    if (found->sizes() != p.param.sizes())
      throw CheckpointError(file + ": tensor '" + p.name + "' has shape " + c10::str(found->sizes()) +
                            ", the model expects " + c10::str(p.param.sizes()));
    loaded.push_back(found->to(p.param.options()).clone());
  }
  average_ = std::move(loaded);
  started_ = true;
}

void WeightEma::record_eval(double val_loss, const nlohmann::json& evals) {
  last_val_ = val_loss;
  if (std::isfinite(val_loss)) best_val_ = std::min(best_val_, val_loss);
  if (evals.is_object())
    for (auto it = evals.begin(); it != evals.end(); ++it) last_evals_[it.key()] = it.value();
}

nlohmann::json WeightEma::summary() const {
  nlohmann::json s = {{"decay", decay_},
                      {"final_val_loss", std::isfinite(last_val_) ? nlohmann::json(last_val_) : nlohmann::json()},
                      {"best_val_loss", std::isfinite(best_val_) ? nlohmann::json(best_val_) : nlohmann::json()}};
  for (const char* k : {"tasks", "sets"})
    if (last_evals_.contains(k)) s[k] = last_evals_[k];
  return s;
}

void WeightEma::save_state(nlohmann::json& extra) const {
  extra["ema"] = summary();
}

void WeightEma::load_eval_state(const nlohmann::json& extra) {
  if (!extra.contains("ema") || !extra["ema"].is_object()) return;
  const auto& e = extra["ema"];
  if (e.contains("final_val_loss") && e["final_val_loss"].is_number()) last_val_ = e["final_val_loss"].get<double>();
  if (e.contains("best_val_loss") && e["best_val_loss"].is_number()) best_val_ = e["best_val_loss"].get<double>();
  for (const char* k : {"tasks", "sets"})
    if (e.contains(k)) last_evals_[k] = e[k];
}

WeightEma::Swap::Swap(WeightEma& ema) : ema_(ema) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema_.params_.size(); ++i) {
    auto& p = ema_.params_[i].param;
    live_.push_back(p.detach().clone());
    if (ema_.started_) p.detach().copy_(ema_.average_[i]);
  }
}

WeightEma::Swap::~Swap() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) ema_.params_[i].param.detach().copy_(live_[i]);
}

}  // namespace keel
