// train.ema_decay: an exponential moving average of the weights (levanter,
// modded-nanogpt; docs/papers.md#weight-averaging), theta_bar <- b theta_bar
// + (1 - b) theta after every optimizer step, starting from the weights at
// the first step it sees. One copy of every parameter in its own dtype, on
// its device (keel plan counts it); buffers are not averaged. The trainer
// evaluates it beside the live weights (Swap), saves it in every checkpoint
// (ema.safetensors) so a resumed run continues it exactly, and keel eval,
// export-hf and sample read it with --weights ema.
#pragma once

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>

#include <string>
#include <utility>
#include <vector>

#include "model/transformer.h"
#include "optim/optimizer.h"

namespace keel {

class WeightEma {
 public:
  WeightEma(std::vector<NamedParam> params, double decay);
  double decay() const { return decay_; }
  // After an optimizer step: a device op (lerp), no host sync. The first call copies the weights.
  void update();
  bool started() const { return started_; }
  int64_t numel() const;  // elements averaged (keel plan: bytes = numel x the weights' element size)

  // {name: average} for checkpoints; empty before the first update.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // From a checkpoint's ema.safetensors; throws CheckpointError naming `file`
  // and the tensor that is missing or of another shape.
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& tensors, const std::string& file);

  // Its evaluations (the trainer's: validation loss, held-out sets, tasks),
  // kept for the summary and for checkpoints.
  void record_eval(double val_loss, const nlohmann::json& evals);
  double last_val_loss() const { return last_val_; }
  double best_val_loss() const { return best_val_; }
  nlohmann::json summary() const;  // {"decay", "final_val_loss", "best_val_loss", "tasks", "sets"}
  void save_state(nlohmann::json& extra) const;
  void load_eval_state(const nlohmann::json& extra);

  // While alive, the parameters hold the average; the live weights are kept
  // aside and put back by the destructor (for evaluation: no gradients flow).
  class Swap {
   public:
    explicit Swap(WeightEma& ema);
    ~Swap();
    Swap(const Swap&) = delete;
    Swap& operator=(const Swap&) = delete;

   private:
    WeightEma& ema_;
    std::vector<torch::Tensor> live_;
  };

 private:
  std::vector<NamedParam> params_;
  std::vector<torch::Tensor> average_;
  double decay_;
  bool started_ = false;
  double last_val_ = NAN, best_val_ = INFINITY;
  nlohmann::json last_evals_ = nlohmann::json::object();
};

// The name of the file a checkpoint keeps the average in.
constexpr const char* kEmaFile = "ema.safetensors";

}  // namespace keel
