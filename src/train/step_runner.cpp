#include "train/step_runner.h"

#include <ATen/autocast_mode.h>

#include "config/schema.h"
#include "model/chunked_loss.h"
#include "optim/grad_norms.h"
#include "optim/update_clip.h"
#include "util/log.h"

#ifdef KEEL_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace keel {

#ifdef KEEL_WITH_CUDA
struct StepRunner::Graph {
  // One side stream for every warm-up step and the capture: a fresh pool
  // stream per step would leave the caching allocator holding each step's
  // peak in blocks tied to its own stream (about 3x the step before capture).
  c10::cuda::CUDAStream side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};
namespace {
// `later` waits (on the device) for everything queued so far on `earlier`.
void stream_wait(const c10::cuda::CUDAStream& later, const c10::cuda::CUDAStream& earlier) {
  at::cuda::CUDAEvent done;
  done.record(earlier);
  done.block(later);
}
}  // namespace
#else
struct StepRunner::Graph {};
#endif

void check_cuda_graph_setup(const Config& cfg, const ComputeSetup& compute, int world_size) {
  if (!cfg.train.cuda_graph) return;
  ConfigErrors e;
  if (!compute.device.is_cuda())
    e.add("train.cuda_graph", "needs a CUDA device; this run is on " + compute.device.str());
  if (world_size > 1)
    e.add("train.cuda_graph", strf("is not available with data parallelism (%d ranks): the gradient all-reduce "
                                   "is launched from backward hooks outside a graph", world_size));
  if (!e.empty()) throw ConfigError(e);
}

StepRunner::StepRunner(Transformer model, Optimizer& optimizer, const Config& cfg, const ComputeSetup& compute,
                       int64_t micro_batch)
    : model_(std::move(model)), optimizer_(optimizer), cfg_(cfg), compute_(compute), micro_batch_(micro_batch) {
  if (cfg.train.qk_clip_tau)  // QK-clip: the training forwards record each head's largest logit
    for (const auto& b : *model_->blocks) b->as<BlockImpl>()->attn->track_head_max = true;
  // Refused here as well as by the config check: a StepRunner built by
  // hand (bench, tests, a later caller) must not capture an optimizer that
  // would read the host inside the graph. Checked on every device, so the
  // CPU tests hold it.
  if (cfg.train.cuda_graph) {
    if (const std::string why = optimizer.graph_capture_obstacle(); !why.empty()) {
      ConfigErrors e;
      e.add("train.cuda_graph", "cannot capture this optimizer: " + why);
      throw ConfigError(e);
    }
  }
  graph_mode_ = cfg.train.cuda_graph && compute.device.is_cuda();
  if (graph_mode_) {
    // Cast weights must be recomputed inside the graph, not served from
    // autocast's cache (memory the graph does not own).
    at::autocast::set_autocast_cache_enabled(false);
    lr_device_ = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat32).device(compute.device));
  }
}

StepRunner::~StepRunner() {
  if (graph_mode_) at::autocast::set_autocast_cache_enabled(true);
}

bool StepRunner::captured() const {
#ifdef KEEL_WITH_CUDA
  return graph_ && graph_->graph;
#else
  return false;
#endif
}

int64_t StepRunner::graph_stream_id() const {
#ifdef KEEL_WITH_CUDA
  return graph_ ? static_cast<int64_t>(graph_->side.id()) : -1;
#else
  return -1;
#endif
}

void StepRunner::begin_step() {
  hold_attention_order();  // train.attention_backend holds even after PyTorch reorders the backends
  model_->begin_step();
}

DeviceBatch StepRunner::to_device(const Batch& batch) {
  const auto& dev = compute_.device;
  if (!graph_mode_) return {batch.inputs.to(dev, /*non_blocking=*/true), batch.targets.to(dev, true)};
  if (!static_inputs_.defined()) {  // the graph reads its inputs from fixed addresses
    static_inputs_ = torch::empty_like(batch.inputs, torch::TensorOptions().device(dev));
    static_targets_ = torch::empty_like(batch.targets, torch::TensorOptions().device(dev));
  }
  static_inputs_.copy_(batch.inputs, /*non_blocking=*/true);
  static_targets_.copy_(batch.targets, true);
  return {static_inputs_, static_targets_};
}

StepLosses StepRunner::forward_backward(const DeviceBatch& batch, const MicroHooks& hooks) {
  const int64_t n_micro = batch.inputs.size(0) / micro_batch_;
  auto opts = torch::TensorOptions().device(compute_.device);
  StepLosses out{torch::zeros({}, opts), torch::zeros({}, opts)};
  for (int64_t i = 0; i < n_micro; ++i) {
    auto x = batch.inputs.narrow(0, i * micro_batch_, micro_batch_);
    auto y = batch.targets.narrow(0, i * micro_batch_, micro_batch_);
    LossParts loss;
    {
      AutocastScope autocast(compute_.bf16_autocast, compute_.device.type());
      loss = model_loss(*model_, x, y, cfg_.train.z_loss, cfg_.train.loss_chunk_tokens);
    }
    if (hooks.before_backward) hooks.before_backward(i, loss);
    // Equal-sized micro-batches: the mean of their means is the batch mean.
    (loss.total / static_cast<double>(n_micro)).backward();
    if (hooks.after_backward) hooks.after_backward(i);
    out.ce += loss.ce.detach() / static_cast<double>(n_micro);
    if (loss.z.defined()) out.z += loss.z.detach() / static_cast<double>(n_micro);
  }
  return out;
}

StepClip StepRunner::clip(const torch::Tensor& loss) const {
  StepClip out;
  out.grad_norm = clip_grad_norm(optimizer_.params(), cfg_.train.grad_clip, optimizer_.grad_shard());
  // A non-finite loss or gradient skips the update on the device, no sync.
  out.found_inf = 1.0 - (torch::isfinite(out.grad_norm) & torch::isfinite(loss)).to(torch::kFloat32);
  return out;
}

void StepRunner::update(double lr, const torch::Tensor& found_inf) {
  if (!cfg_.train.update_clip) {
    optimizer_.step(lr, found_inf);
    return;
  }
  std::vector<torch::Tensor> before;  // train.update_clip: the weights the update is measured from
  {
    torch::NoGradGuard no_grad;
    for (const auto& p : optimizer_.params()) before.push_back(p.param.detach().clone());
  }
  optimizer_.step(lr, found_inf);
  last_update_norm_ = clip_update(optimizer_.params(), before, *cfg_.train.update_clip,
                                  cfg_.train.update_clip_per_param);
}

StepResult StepRunner::graphed_step(const DeviceBatch& batch, double lr) {
#ifdef KEEL_WITH_CUDA
  if (!graph_mode_) throw std::logic_error("graphed_step without train.cuda_graph on CUDA");
  lr_device_.fill_(lr);  // a kernel on the current stream: no sync
  if (captured()) {
    graph_->graph->replay();
    return captured_result_;
  }
  const auto current = c10::cuda::getCurrentCUDAStream(compute_.device.index());
  if (!graph_)
    graph_ = std::unique_ptr<Graph>(
        new Graph{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, compute_.device.index()), nullptr});
  const auto side = graph_->side;
  stream_wait(side, current);  // the batch copy and the LR are queued on `current`
  StepResult result;
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    begin_step();
    // Gradients unset: the first backward assigns .grad, so during capture
    // they come from the graph's private memory pool and every replay
    // rewrites them in place (no zeroing between replays).
    optimizer_.zero_grad();
    if (eager_steps_ < kGraphWarmupSteps) {
      result.loss = forward_backward(batch);
      result.clip = clip(result.loss.ce);
      optimizer_.step(lr_device_, result.clip.found_inf);
      ++eager_steps_;
    } else {
      // The warm-up's cached blocks go back to the device before the graph
      // takes its private pool (a sync, once).
      c10::cuda::device_synchronize();
      c10::cuda::CUDACachingAllocator::emptyCache();
      graph_->graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local capture: the loader's prefetch thread may allocate
      // pinned host memory meanwhile, which global mode forbids.
      graph_->graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      captured_result_.loss = forward_backward(batch);
      captured_result_.clip = clip(captured_result_.loss.ce);
      optimizer_.step(lr_device_, captured_result_.clip.found_inf);
      graph_->graph->capture_end();
      graph_->graph->replay();  // capture records without running: this is the step
      result = captured_result_;
    }
  }
  stream_wait(current, side);
  return result;
#else
  (void)batch;
  (void)lr;
  throw std::logic_error("train.cuda_graph needs a CUDA build of keel");
#endif
}

}  // namespace keel
