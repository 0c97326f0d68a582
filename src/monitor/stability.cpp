#include "monitor/stability.h"
#include "util/json.h"

#include <cmath>

namespace keel {

nlohmann::json SpikeEvent::to_json() const {
  nlohmann::json j = {{"step", step}, {"signal", signal}, {"value", value}, {"z", std::isfinite(z) ? z : 1e308},
                      {"mean", mean}, {"std", std}};
  j["top_attn_layer"] = top_attn_layer ? nlohmann::json(*top_attn_layer) : nlohmann::json();
  return j;
}

StabilityMonitor::StabilityMonitor(const MonitorConfig& c)
    : cfg_(c),
      loss_spikes_(c.spike_window, c.spike_threshold, std::min(c.spike_warmup, c.spike_window)),
      grad_spikes_(c.spike_window, c.spike_threshold, std::min(c.spike_warmup, c.spike_window)),
      loss_score_(c.spike_score_window, c.spike_score_sigma, std::min<int64_t>(100, c.spike_score_window)),
      grad_score_(c.spike_score_window, c.spike_score_sigma, std::min<int64_t>(100, c.spike_score_window)) {}

void StabilityMonitor::push(int64_t step, const torch::Tensor& values) {
  pending_.emplace_back(step, values.detach().to(torch::kFloat64));
}

std::vector<SpikeEvent> StabilityMonitor::drain() {
  std::vector<SpikeEvent> events;
  if (pending_.empty()) return events;
  std::vector<torch::Tensor> all;
  for (auto& p : pending_) all.push_back(p.second);
  auto host = torch::stack(all).cpu();  // the one sync
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto found = observe(pending_[i].first, host[i][0].item<double>(), host[i][1].item<double>());
    events.insert(events.end(), found.begin(), found.end());
  }
  pending_.clear();
  return events;
}

std::vector<SpikeEvent> StabilityMonitor::observe(int64_t step, double loss, double grad_norm) {
  std::vector<SpikeEvent> events;
  if (std::isnan(initial_loss_) && std::isfinite(loss)) initial_loss_ = loss;
  const std::pair<const char*, double> signals[2] = {{"loss", loss}, {"grad_norm", grad_norm}};
  SpikeDetector* detectors[2] = {&loss_spikes_, &grad_spikes_};
  SpikeScore* scores[2] = {&loss_score_, &grad_score_};
  for (int i = 0; i < 2; ++i) {
    SpikeVerdict v = detectors[i]->observe(signals[i].second);
    scores[i]->observe(signals[i].second);
    if (v.spike) events.push_back({step, signals[i].first, signals[i].second, v.z, v.mean, v.std, top_attn_layer_});
  }
  check_loss_divergence(step, loss);
  return events;
}

void StabilityMonitor::check_loss_divergence(int64_t step, double loss) {
  if (diverged()) return;
  if (!std::isfinite(loss)) {
    diverged_step_ = step;
    diverged_reason_ = "non-finite loss";
  } else if (std::isfinite(initial_loss_) && loss > cfg_.diverge_loss_factor * initial_loss_) {
    diverged_step_ = step;
    diverged_reason_ = "loss " + std::to_string(loss) + " > " + std::to_string(cfg_.diverge_loss_factor) +
                       " x initial loss " + std::to_string(initial_loss_);
  }
}

void StabilityMonitor::observe_model_stats(int64_t step, const nlohmann::json& stats) {
  const auto& attn = stats.at("attn");
  if (stats.contains("output")) {
    // Output-logit drift (Wortsman et al. 2023, section 3.2), as the run ended.
    const auto& out = stats["output"];
    auto value = [&](const char* key) { return out.contains(key) && out[key].is_number() ? out[key].get<double>() : NAN; };
    final_z_ = value("z_loss");
    final_log_z_ = value("mean_log_z");
    final_output_max_ = value("max_logit");
    if (!output_unstable() && out.contains("max_logit") &&
        (!std::isfinite(final_output_max_) || final_output_max_ > cfg_.diverge_output_logit)) {
      output_unstable_step_ = step;
      output_unstable_value_ = final_output_max_;
    }
  }
  max_attn_logit_.resize(std::max(max_attn_logit_.size(), attn.size()), 0.0);
  double best = -1;
  for (size_t i = 0; i < attn.size(); ++i) {
    const double v = attn[i]["max_logit"].get<double>();
    max_attn_logit_[i] = std::max(max_attn_logit_[i], v);
    if (v > best) {
      best = v;
      top_attn_layer_ = static_cast<int64_t>(i);
    }
  }
  if (!logit_unstable() && !attn.empty()) {
    const double l0 = attn[0]["max_logit"].get<double>();
    if (!std::isfinite(l0) || l0 > cfg_.diverge_attn_logit) {
      logit_unstable_step_ = step;
      logit_unstable_value_ = l0;
    }
  }
}

std::string StabilityMonitor::divergence_text() const {
  return diverged() ? "loss diverged at step " + std::to_string(diverged_step_) + ": " + diverged_reason_ : "";
}

std::string StabilityMonitor::instability_text() const {
  return logit_unstable() ? "attention logits unstable at step " + std::to_string(logit_unstable_step_) +
                                ": layer-0 max logit " + std::to_string(logit_unstable_value_) + " > " +
                                std::to_string(cfg_.diverge_attn_logit) + " (Wortsman et al. 2023)"
                          : "";
}

nlohmann::json StabilityMonitor::first_failure() const {
  int64_t first = -1;
  for (int64_t s : {logit_unstable_step_, output_unstable_step_, diverged_step_})
    if (s >= 0 && (first < 0 || s < first)) first = s;
  if (first < 0) return nullptr;
  std::string kind;
  auto add = [&](int64_t s, const char* name) {
    if (s == first) kind += (kind.empty() ? "" : "+") + std::string(name);
  };
  add(logit_unstable_step_, "attention_logits");
  add(output_unstable_step_, "output_logits");
  add(diverged_step_, "loss");
  return {{"kind", kind}, {"step", first}};
}

nlohmann::json StabilityMonitor::summary() const {
  return {{"diverged", diverged()},
          {"diverged_step", diverged() ? nlohmann::json(diverged_step_) : nlohmann::json()},
          {"diverged_reason", diverged() ? nlohmann::json(diverged_reason_) : nlohmann::json()},
          {"attn_logit_unstable", logit_unstable()},
          {"attn_logit_unstable_step", logit_unstable() ? nlohmann::json(logit_unstable_step_) : nlohmann::json()},
          {"output_logit_unstable", output_unstable()},
          {"output_logit_unstable_step", output_unstable() ? nlohmann::json(output_unstable_step_) : nlohmann::json()},
          {"first_failure", first_failure()},
          {"spikes", {{"loss", loss_spikes_.spikes()}, {"grad_norm", grad_spikes_.spikes()}}},
          {"spike_score_percent", {{"loss", loss_score_.score_percent()}, {"grad_norm", grad_score_.score_percent()}}},
          {"max_attn_logit_per_layer", max_attn_logit_},
          {"final_z_loss", std::isfinite(final_z_) ? nlohmann::json(final_z_) : nlohmann::json()},
          {"final_mean_log_z", std::isfinite(final_log_z_) ? nlohmann::json(final_log_z_) : nlohmann::json()},
          {"final_max_output_logit",
           std::isfinite(final_output_max_) ? nlohmann::json(final_output_max_) : nlohmann::json()}};
}

nlohmann::json StabilityMonitor::state() const {
  return {{"loss_spikes", loss_spikes_.state()},
          {"grad_spikes", grad_spikes_.state()},
          {"loss_score", loss_score_.state()},
          {"grad_score", grad_score_.state()},
          {"initial_loss", std::isnan(initial_loss_) ? nlohmann::json() : nlohmann::json(initial_loss_)},
          {"top_attn_layer", top_attn_layer_ ? nlohmann::json(*top_attn_layer_) : nlohmann::json()},
          {"diverged_step", diverged_step_},
          {"diverged_reason", diverged_reason_},
          {"logit_unstable_step", logit_unstable_step_},
          {"logit_unstable_value", std::isfinite(logit_unstable_value_) ? nlohmann::json(logit_unstable_value_)
                                                                         : nlohmann::json()},
          {"output_unstable_step", output_unstable_step_},
          {"output_unstable_value", std::isfinite(output_unstable_value_) ? nlohmann::json(output_unstable_value_)
                                                                           : nlohmann::json()},
          {"max_attn_logit_per_layer", max_attn_logit_},
          {"final_z_loss", std::isfinite(final_z_) ? nlohmann::json(final_z_) : nlohmann::json()},
          {"final_mean_log_z", std::isfinite(final_log_z_) ? nlohmann::json(final_log_z_) : nlohmann::json()},
          {"final_max_output_logit",
           std::isfinite(final_output_max_) ? nlohmann::json(final_output_max_) : nlohmann::json()}};
}

void StabilityMonitor::load_state(const nlohmann::json& s) {
  loss_spikes_.load_state(s.at("loss_spikes"));
  grad_spikes_.load_state(s.at("grad_spikes"));
  loss_score_.load_state(s.at("loss_score"));
  grad_score_.load_state(s.at("grad_score"));
  initial_loss_ = s.at("initial_loss").is_number() ? s["initial_loss"].get<double>() : NAN;
  if (s.at("top_attn_layer").is_number()) top_attn_layer_ = json_int<int64_t>(s["top_attn_layer"]);
  diverged_step_ = json_int<int64_t>(s.at("diverged_step"));
  diverged_reason_ = s.at("diverged_reason").get<std::string>();
  if (s.contains("logit_unstable_step")) {
    logit_unstable_step_ = json_int<int64_t>(s["logit_unstable_step"]);
    if (s.contains("logit_unstable_value") && s["logit_unstable_value"].is_number())
      logit_unstable_value_ = s["logit_unstable_value"].get<double>();
  } else if (diverged_reason_.rfind("layer-0 max attention logit", 0) == 0) {
    // An older keel counted the logit flag as divergence: it is instability.
    logit_unstable_step_ = diverged_step_;
    diverged_step_ = -1;
    diverged_reason_.clear();
  }
  if (s.contains("output_unstable_step") && s["output_unstable_step"].is_number()) {
    output_unstable_step_ = json_int<int64_t>(s["output_unstable_step"]);
    if (s.contains("output_unstable_value") && s["output_unstable_value"].is_number())
      output_unstable_value_ = s["output_unstable_value"].get<double>();
  }
  // Checkpoints before these moved here kept the maxima beside the state.
  if (s.contains("max_attn_logit_per_layer")) max_attn_logit_ = s["max_attn_logit_per_layer"].get<std::vector<double>>();
  if (s.contains("final_z_loss") && s["final_z_loss"].is_number()) final_z_ = s["final_z_loss"].get<double>();
  if (s.contains("final_mean_log_z") && s["final_mean_log_z"].is_number()) final_log_z_ = s["final_mean_log_z"].get<double>();
  if (s.contains("final_max_output_logit") && s["final_max_output_logit"].is_number())
    final_output_max_ = s["final_max_output_logit"].get<double>();
}

}  // namespace keel
