#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace keel {

double lr_at(const TrainConfig& t, int64_t step) {
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
