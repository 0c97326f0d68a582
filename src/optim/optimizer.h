// The optimizers: AdamW with decoupled weight decay and two parameter groups
// (decay / no decay), on LibTorch's fused kernel or a readable reference
// loop that the tests hold the fused kernel to; and (optim/muon.h) Muon on
// the linears with AdamW on the rest. `make_optimizer` picks by
// train.optimizer.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"

namespace keel {

// The dtype a sum of squares accumulates in: float32 for bf16 and fp32
// tensors, float64 for an fp64 run's (train.precision fp64), where a float32
// accumulator would be a narrowing LibTorch refuses.
inline c10::ScalarType norm_dtype(const std::vector<torch::Tensor>& tensors) {
  return tensors.empty() ? torch::kFloat32 : at::promote_types(tensors.front().scalar_type(), torch::kFloat32);
}

struct NamedParam {
  std::string name;
  torch::Tensor param;
  // µP/CompleteP (model/parametrization.h): this parameter's LR and weight
  // decay as multiples of the schedule's LR and train.weight_decay.
  double lr_mult = 1.0;
  double wd_mult = 1.0;
};

// Norm gains/biases, all biases, the l2 temperature, and (unless
// train.decay_embeddings) the embedding get no weight decay.
bool wants_weight_decay(const std::string& name, const TrainConfig& t);

struct GradShard;  // optim/grad_norms.h

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate `lr` (the schedule's value for train.lr).
  // `found_inf` (a 0/1 float scalar on the parameters' device, or undefined)
  // skips the update on the device without a host sync, as the fused
  // kernel's found_inf argument does.
  virtual void step(double lr, const torch::Tensor& found_inf = {}) = 0;
  // The same with the learning rate as a float32 scalar tensor on the
  // parameters' device (CUDA-graph capture: the LR changes between replays).
  virtual void step(const torch::Tensor& lr, const torch::Tensor& found_inf = {}) = 0;
  void zero_grad();
  // Every parameter it trains, in the model's order.
  const std::vector<NamedParam>& params() const { return params_; }
  // The state a checkpoint keeps, by name.
  virtual std::vector<std::pair<std::string, torch::Tensor>> state() const = 0;
  virtual void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) = 0;
  // Lines for the settings table: what trains which parameters.
  virtual std::vector<std::string> describe() const = 0;
  // Why step(lr tensor) cannot be captured in a CUDA graph (it reads the
  // host in the middle of the step), or empty when it can.
  virtual std::string graph_capture_obstacle() const = 0;
  // ZeRO-1: which parameters' gradients and state this rank holds
  // (optim/grad_norms.h); null when it holds all of them.
  virtual const GradShard* grad_shard() const { return nullptr; }

  // Monitor steps: while on, the next step() keeps statistics of the update
  // it computes that only the optimizer sees (Muon: the Newton–Schulz
  // output's RMS and largest singular value, and the update's spectral
  // norm), as device scalars by parameter name and statistic
  // (monitor/param_stats.h reads them). Off again by the caller.
  void record_step_stats(bool on) {
    record_step_stats_ = on;
    if (on) step_stats_.clear();
  }
  const std::map<std::string, std::map<std::string, torch::Tensor>>& step_stats() const { return step_stats_; }

 protected:
  std::vector<NamedParam> params_;
  bool record_step_stats_ = false;
  std::map<std::string, std::map<std::string, torch::Tensor>> step_stats_;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<NamedParam> params, const TrainConfig& t);

  void step(double lr, const torch::Tensor& found_inf = {}) override;
  // The fused kernel reads a tensor LR on the device; the reference loop reads it back.
  void step(const torch::Tensor& lr, const torch::Tensor& found_inf = {}) override;

  bool fused() const { return fused_; }
  std::string graph_capture_obstacle() const override;
  // Optimizer state by name ("exp_avg.<param>", "exp_avg_sq.<param>", "step.<param>").
  std::vector<std::pair<std::string, torch::Tensor>> state() const override;
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state) override;
  std::vector<std::string> describe() const override;

 private:
  // Parameters updated by one fused call: one weight decay and one LR multiplier.
  struct Group {
    std::vector<size_t> index;  // into params_
    double weight_decay;
    double lr_mult = 1.0;
    bool decayed = true;  // train.weight_decay applies (wants_weight_decay)
  };
  // lr_tensor, when defined, takes the place of lr.
  void step_fused(const Group& g, double lr, const torch::Tensor& lr_tensor, const torch::Tensor& found_inf);
  void step_reference(const Group& g, double lr);
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, steps_;
  std::vector<Group> groups_;
  TrainConfig cfg_;
  bool fused_;
};

// The optimizer train.optimizer names over `params`; `head_dim` for Muon's per-head q/k/v.
std::unique_ptr<Optimizer> make_optimizer(std::vector<NamedParam> params, const TrainConfig& t, int64_t head_dim);


}  // namespace keel
