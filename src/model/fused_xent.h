// The output head's softmax work on the CPU in one kernel (fused_xent.cpp).
#pragma once

#include <torch/torch.h>

namespace keel {

// One chunk of the output head's loss on CPU fp32 logits [n, padded]
// (contiguous), rows in parallel: with cap > 0 the softcap cap * tanh(x / cap)
// is applied first; columns from `vocab` on are padding (probability 0).
// Fills lse [n] (log-sum-exp of each row) and target_logit [n] (the
// target's logit, after the cap), so cross-entropy = lse - target_logit and
// z-loss = lse^2. The logits are scratch (a softcap leaves its tanh there);
// with `grad` they are overwritten in place by
// d(mean(ce) + z_coef mean(lse^2)) / d(logits before the cap), given
// inv_n = 1 / N: softmax (1 + 2 z_coef lse) inv_n - onehot inv_n, times
// (1 - tanh^2) under the cap, padding 0. Returns false (and touches nothing)
// where it does not apply (other dtype or device, the kernels off:
// KEEL_CPU_FUSED=0, KEEL_CPU_FUSED_LOSS=0 for this one alone); the
// caller then runs the composite (chunked_loss.cpp), which CUDA runs.
bool fused_cpu_softmax_xent(torch::Tensor& logits, const torch::Tensor& targets, int64_t vocab, double cap,
                            double inv_n, double z_coef, bool grad, torch::Tensor* lse, torch::Tensor* target_logit);
// Whether the fused CPU kernels may run on this thread now (KEEL_CPU_FUSED,
// KEEL_CPU_KERNELS, CompositeOnly).
bool fused_cpu_kernels_enabled();
// Whether fused_cpu_softmax_xent runs for fp32 CPU logits (the kernels on,
// KEEL_CPU_FUSED_LOSS not 0): for keel plan, which then counts one copy of a
// chunk's logits instead of two.
bool fused_cpu_loss_applies();

}  // namespace keel
