// The device work of one training step, shared by the trainer and keel bench
// so that what bench times is what train runs:
//   begin_step       sigmaReparam's power-iteration step, QK-clip's maxima reset
//   to_device        the batch to the device (asynchronous from pinned memory)
//   forward_backward every micro-batch's forward, loss and backward
//   clip             the global gradient norm, clipping, the non-finite verdict
//   update           the optimizer, skipped on the device when the verdict says so
// Nothing here waits for the device: on CUDA the host runs ahead.
//
// train.cuda_graph (CUDA, one process): the first kGraphWarmupSteps steps run
// eagerly on a side stream (cuBLAS workspaces, autograd and allocator state
// settle); the next is captured as one CUDA graph of forward, backward, clip
// and update; every later step is a copy of its batch into static input
// buffers, the learning rate into a device tensor, and one replay. Features
// that need the host in the middle of a step are refused with it (config
// checks in train_config.cpp).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

#include "config/config.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "train/device.h"
#include "optim/optimizer.h"

namespace keel {

struct DeviceBatch {
  torch::Tensor inputs, targets;  // int64 [rows, T] on the compute device
};

struct StepLosses {
  torch::Tensor ce;  // mean cross-entropy over the step's micro-batches (device scalar)
  torch::Tensor z;   // mean z-loss term (device scalar; zero without z-loss)
};

struct StepClip {
  torch::Tensor grad_norm;  // global L2 norm of the gradients before clipping (device scalar)
  torch::Tensor found_inf;  // 1.0 when the loss or the norm is non-finite, else 0.0 (device scalar)
};

struct StepResult {
  StepLosses loss;
  StepClip clip;
};

// Called around each micro-batch's backward: the trainer arms the gradient
// all-reduce and plants test faults before it; bench takes its laps.
struct MicroHooks {
  std::function<void(int64_t micro, LossParts& loss)> before_backward;
  std::function<void(int64_t micro)> after_backward;
};

constexpr int64_t kGraphWarmupSteps = 3;

class StepRunner {
 public:
  StepRunner(Transformer model, Optimizer& optimizer, const Config& cfg, const ComputeSetup& compute,
             int64_t micro_batch);
  ~StepRunner();

  void begin_step();
  DeviceBatch to_device(const Batch& batch);
  StepLosses forward_backward(const DeviceBatch& batch, const MicroHooks& hooks = {});
  // `loss` is the step's loss as the caller sees it (all-reduced when data parallel).
  StepClip clip(const torch::Tensor& loss) const;
  void update(double lr, const torch::Tensor& found_inf);
  // train.update_clip: the norm of the last update before it was clipped (a device scalar; undefined without it).
  const torch::Tensor& last_update_norm() const { return last_update_norm_; }

  // train.cuda_graph: begin_step .. update as warm-up, capture or replay. The
  // tensors returned after capture are the graph's own and are overwritten by
  // the next replay: read or copy them before the next step.
  StepResult graphed_step(const DeviceBatch& batch, double lr);
  bool graph_mode() const { return graph_mode_; }
  bool captured() const;
  // The side stream warm-up and capture run on (-1 before the first graphed step).
  int64_t graph_stream_id() const;

 private:
  Transformer model_;
  Optimizer& optimizer_;
  torch::Tensor last_update_norm_;
  const Config& cfg_;
  ComputeSetup compute_;
  int64_t micro_batch_;
  bool graph_mode_ = false;
  // Graph mode: static inputs, the learning rate on the device, the captured step.
  torch::Tensor static_inputs_, static_targets_, lr_device_;
  int64_t eager_steps_ = 0;
  StepResult captured_result_;
  struct Graph;
  std::unique_ptr<Graph> graph_;
};

// Refuses train.cuda_graph where it cannot run (not CUDA, data parallel);
// throws ConfigError naming the key. The key combinations are checked with
// the config (train_config.cpp).
void check_cuda_graph_setup(const Config& cfg, const ComputeSetup& compute, int world_size);

}  // namespace keel
