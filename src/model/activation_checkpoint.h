// Activation checkpointing (Chen et al. 2016, "Training Deep Nets with
// Sublinear Memory Cost"): a block keeps only its input during the forward,
// and backward runs the block again, with a graph, to back-propagate through
// it. PyTorch's reentrant torch.utils.checkpoint does the same; LibTorch has
// no C++ form of it.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace keel {

// y = f(x), keeping only x. The forward runs f without a graph; backward
// runs f(x) again under the forward's autocast state, then back-propagates
// the incoming gradient through it: f's parameters receive their gradients
// during that inner backward, x's is returned. f must compute the same
// values both times (keel's blocks draw no random numbers) and read nothing
// that changes between forward and backward.
torch::Tensor checkpointed(const torch::Tensor& x, std::function<torch::Tensor(const torch::Tensor&)> f);

}  // namespace keel
