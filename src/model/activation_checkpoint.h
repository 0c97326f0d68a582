// Activation checkpointing (Chen et al. 2016, "Training Deep Nets with
// Sublinear Memory Cost"): a block keeps only its input during the forward,
// and backward runs the block again, with a graph, to back-propagate through
// it. PyTorch's reentrant torch.utils.checkpoint does the same; LibTorch has
// no C++ form of it (docs/papers.md#memory-zero-1-and-recomputation).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace keel {

// y = f(x), keeping only x. The forward runs f without a graph; backward
// runs f(x) again under the forward's autocast state, then back-propagates
// the incoming gradient through it: f's parameters receive their gradients
// during that inner backward, x's is returned. f must compute the same
// values both times (keel's blocks draw no random numbers) and read nothing
// that changes between forward and backward.
torch::Tensor checkpointed(const torch::Tensor& x, std::function<torch::Tensor(const torch::Tensor&)> f);

// train.activation_checkpointing: selective. As checkpointed(), but the
// forward also keeps the output of every keel::linear that f calls, and the
// recompute in backward takes them back instead of multiplying again: only
// the cheap operations between the linears (norms, QK-Norm, RoPE,
// activations) and the attention kernel run twice, as Megatron-LM's
// selective recomputation re-runs core attention (Korthikanti et al. 2022).
// The replayed linear back-propagates through the same backward code as
// the linear it replaces (fused_ops.cpp), so the gradients are those of a
// plain backward.
torch::Tensor checkpointed_keeping_linears(const torch::Tensor& x,
                                           std::function<torch::Tensor(const torch::Tensor&)> f);

// What keel::linear consults while a selective checkpoint runs on this
// thread: record its outputs (the forward), or hand them back in the same
// order (the recompute). Null outside one.
struct LinearOutputCache {
  std::vector<torch::Tensor> outputs;
  size_t next = 0;
  bool replaying = false;
  // The next recorded output; throws if the recompute asks for more, or another shape, than the forward made.
  torch::Tensor take(c10::IntArrayRef expected_sizes);
};
LinearOutputCache* active_linear_cache();

}  // namespace keel
