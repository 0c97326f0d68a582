// The learning rate as a pure function of the step, so a resumed run needs
// nothing but the step to continue the schedule (LibTorch's schedulers cannot
// be serialised: docs/papers.md#libtorch-notes).
#pragma once

#include "config/config.h"

namespace keel {

// LR for optimizer step `step` (0-based): linear warm-up from lr/warmup to lr
// over warmup_steps, then cosine / linear decay to min_lr at max_steps,
// constant, or warmup-stable-decay (linear decay over the last decay_fraction).
// With train.cooldown_steps: from step cooldown_at on, the value there times
// 1 - x, (1 + cos(pi x)) / 2 or 1 - sqrt(x), x = (step - cooldown_at) /
// cooldown_steps (Hägele et al. 2024).
double lr_at(const TrainConfig& t, int64_t step);

}  // namespace keel
