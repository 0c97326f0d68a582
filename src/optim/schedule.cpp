#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace keel {

double lr_at(const TrainConfig& t, int64_t step) {
  if (t.cooldown_steps > 0 && step >= t.cooldown_at) {
    // From the schedule's value at the branch point to 0 over cooldown_steps:
    // the branch's first step keeps it, x = (step - at) / steps.
    TrainConfig trunk = t;
    trunk.cooldown_steps = 0;
    const double base = lr_at(trunk, t.cooldown_at);
    const double x = std::min(1.0, static_cast<double>(step - t.cooldown_at) / static_cast<double>(t.cooldown_steps));
    switch (t.cooldown_shape) {
      case CooldownShape::linear: return base * (1.0 - x);
      case CooldownShape::cosine: return base * 0.5 * (1.0 + std::cos(M_PI * x));
      case CooldownShape::one_minus_sqrt: return base * (1.0 - std::sqrt(x));
    }
  }
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  if (t.schedule == ScheduleKind::constant) return t.lr;
  if (t.schedule == ScheduleKind::wsd) {
    // Stable at the peak, then a linear decay over the final decay_fraction.
    const int64_t decay_steps = std::max<int64_t>(1, static_cast<int64_t>(std::llround(t.decay_fraction * t.max_steps)));
    const int64_t decay_start = std::max(t.warmup_steps, t.max_steps - decay_steps);
    if (step < decay_start) return t.lr;
    const double p = std::min(1.0, static_cast<double>(step - decay_start) / std::max<int64_t>(1, t.max_steps - decay_start));
    return t.lr - (t.lr - t.min_lr) * p;
  }
  const int64_t span = std::max<int64_t>(1, t.max_steps - t.warmup_steps);
  const double p = std::min(1.0, static_cast<double>(step - t.warmup_steps) / static_cast<double>(span));
  if (t.schedule == ScheduleKind::linear) return t.lr - (t.lr - t.min_lr) * p;
  return t.min_lr + (t.lr - t.min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));  // cosine
}

}  // namespace keel
