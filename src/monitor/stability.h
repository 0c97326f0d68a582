// Run-level stability bookkeeping (docs/papers.md#spike-and-divergence-signals):
// spike detection on the loss and the gradient norm, OLMo 2 spike scores,
// and two different things kept apart: loss divergence (a non-finite loss, or
// one above monitor.diverge_loss_factor x the initial loss) and attention-
// logit instability (layer-0 max logit above monitor.diverge_attn_logit,
// Wortsman et al.), which many runs survive; and output-logit instability
// (largest |output logit| above monitor.diverge_output_logit), ordered
// against the other two in first_failure(). The trainer pushes each step's (loss, grad norm) as a device
// tensor and drains them on logging steps with one host copy, so detection adds
// no per-step sync; only monitor.skip_on_spike needs each step's verdict before
// its update.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "monitor/spike_detector.h"

namespace keel {

struct SpikeEvent {
  int64_t step;
  std::string signal;  // "loss" | "grad_norm"
  double value, z, mean, std;
  std::optional<int64_t> top_attn_layer;  // layer with the largest attention logit at the last monitor step
  nlohmann::json to_json() const;
};

class StabilityMonitor {
 public:
  explicit StabilityMonitor(const MonitorConfig& cfg);

  // Queue step `step`'s {loss, grad_norm} (a 2-element device tensor).
  void push(int64_t step, const torch::Tensor& loss_and_grad_norm);
  // Judge every queued step in order; returns the spikes found.
  std::vector<SpikeEvent> drain();
  // Judge one step now (skip-on-spike path); returns its spikes.
  std::vector<SpikeEvent> observe(int64_t step, double loss, double grad_norm);
  // Statistics of a monitor step (train/model_stats.h: "attn", "output"):
  // tracks the top layer and each layer's largest logit over the run, the
  // latest z-loss, and flags logit instability when the layer-0 maximum
  // logit passes monitor.diverge_attn_logit.
  void observe_model_stats(int64_t step, const nlohmann::json& stats);

  bool diverged() const { return diverged_step_ >= 0; }            // the loss diverged
  bool logit_unstable() const { return logit_unstable_step_ >= 0; }  // the attention logits did
  bool output_unstable() const { return output_unstable_step_ >= 0; }  // the output logits did
  // Which of the three failed first and when: {"kind": "attention_logits" |
  // "output_logits" | "loss" (several joined by "+" at one step), "step"}; null when none did.
  nlohmann::json first_failure() const;
  std::string divergence_text() const;                               // why, for the log
  std::string instability_text() const;
  nlohmann::json summary() const;  // spike counts and scores, divergence, attention maxima, final z-loss
  nlohmann::json state() const;    // everything, for checkpoints
  void load_state(const nlohmann::json& state);

 private:
  void check_loss_divergence(int64_t step, double loss);
  MonitorConfig cfg_;
  SpikeDetector loss_spikes_, grad_spikes_;
  SpikeScore loss_score_, grad_score_;
  std::vector<std::pair<int64_t, torch::Tensor>> pending_;
  double initial_loss_ = NAN;
  std::optional<int64_t> top_attn_layer_;
  std::vector<double> max_attn_logit_;  // per layer, over the run's monitor steps
  double final_z_ = NAN;                // z-loss of the output logits at the last monitor step
  double final_log_z_ = NAN;            // mean log Z of the output logits, same step
  double final_output_max_ = NAN;       // largest |output logit|, same step
  int64_t diverged_step_ = -1;
  std::string diverged_reason_;
  int64_t logit_unstable_step_ = -1;
  double logit_unstable_value_ = NAN;
  int64_t output_unstable_step_ = -1;
  double output_unstable_value_ = NAN;
};

}  // namespace keel
