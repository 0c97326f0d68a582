#include "train/step_plan.h"

#include <algorithm>
#include <cmath>

#include "config/eval_config.h"

namespace keel {

namespace {
bool every(int64_t step, int64_t n) { return n > 0 && step % n == 0; }
}  // namespace

StepPlan plan_step(const Config& cfg, int64_t index, bool cpu, bool has_val) {
  StepPlan p;
  p.step = index + 1;
  p.last = p.step == cfg.train.end_step();
  p.eval = has_val && (p.last || every(p.step, cfg.train.eval_every));
  p.tasks = (!cfg.eval.tasks.empty() || !cfg.eval.sets.empty()) && (p.last || every(p.step, task_eval_every(cfg)));
  p.monitor = every(p.step, cfg.monitor.every);
  p.log = every(p.step, cfg.train.log_every) || p.last || p.eval || p.tasks || p.monitor;
  p.checkpoint = every(p.step, cfg.checkpoint.every) || (p.last && cfg.checkpoint.at_end);
  // On CUDA reading a device value is a sync: only where the host stops anyway.
  p.host_sync = cpu || every(p.step, cfg.train.log_every) || p.last;
  p.drain_spikes = p.log || p.checkpoint;
  return p;
}

int64_t VoteCadence::steps_between(double step_s, double bound_s, int64_t log_every) {
  const int64_t most = std::max<int64_t>(1, log_every);
  if (!(step_s > 0)) return most;  // not measured yet, or NaN
  const double fit = std::floor(bound_s / step_s);
  return fit < 1 ? 1 : fit >= static_cast<double>(most) ? most : static_cast<int64_t>(fit);
}

}  // namespace keel
