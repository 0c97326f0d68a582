#include "train/step_plan.h"

namespace keel {

namespace {
bool every(int64_t step, int64_t n) { return n > 0 && step % n == 0; }
}  // namespace

StepPlan plan_step(const Config& cfg, int64_t index, bool cpu, bool has_val) {
  StepPlan p;
  p.step = index + 1;
  p.last = p.step == cfg.train.max_steps;
  p.eval = has_val && (p.last || every(p.step, cfg.train.eval_every));
  p.monitor = every(p.step, cfg.monitor.every);
  p.log = every(p.step, cfg.train.log_every) || p.last || p.eval || p.monitor;
  p.checkpoint = every(p.step, cfg.checkpoint.every) || (p.last && cfg.checkpoint.at_end);
  // On CUDA reading a device value is a sync: only where the host stops anyway.
  p.host_sync = cpu || every(p.step, cfg.train.log_every) || p.last;
  p.drain_spikes = p.log || p.checkpoint;
  return p;
}

}  // namespace keel
