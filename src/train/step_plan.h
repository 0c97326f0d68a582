// What a training step does besides training, decided once before the step
// from the config's cadences: llm.c's "once in a while" blocks, in one place
// instead of a test for each in the loop.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace keel {

struct StepPlan {
  int64_t step = 0;           // 1-based number of the step being run
  bool last = false;          // the run's final step (train.max_steps)
  bool log = false;           // write a metrics record and a progress line
  bool eval = false;          // validation loss, in the record
  bool tasks = false;         // downstream tasks and eval.sets (eval.every, and the last step), in the record
  bool monitor = false;       // attention and output-logit statistics (monitor.every), in the record
  bool checkpoint = false;    // periodic save (checkpoint.every), or the last step with checkpoint.at_end
  bool host_sync = false;     // read the device counters: non-finite steps, the stop vote
  bool drain_spikes = false;  // hand queued loss / grad-norm values to the spike detector
  bool stop_record = false;   // a stop between records: a record of its own that leaves the interval open

  // A stop (signal, --stop-after-step) after this step: it is checkpointed
  // and its spikes are judged, whatever the cadences said. A step that logs
  // anyway keeps its regular record; any other gets a stop record, which
  // must not close the logging interval: the regular records of a stopped
  // and resumed run then equal an uninterrupted run's (MetricsLogger::log_stop).
  void stop() {
    stop_record = !log;
    drain_spikes = checkpoint = true;
  }
};

// `index` is the 0-based step index; `cpu`: the host reads device values
// for free, so it checks every step; `has_val`: a validation split exists.
StepPlan plan_step(const Config& cfg, int64_t index, bool cpu, bool has_val);

// Data parallel on CUDA: the stop vote is a collective and a host sync, so it
// runs on some steps only, yet never much more than `bound_s` of wall time
// apart, whatever train.log_every is: a SIGTERM is acted on (the vote, then
// the save) within about bound_s plus one step, inside SLURM's default 30 s
// grace period. The steps between votes follow the slowest rank's step time,
// reduced with each vote, so every rank votes on the same steps.
class VoteCadence {
 public:
  explicit VoteCadence(int64_t log_every, double bound_s = 5.0) : log_every_(log_every), bound_s_(bound_s) {}
  bool due(int64_t step) const { return step >= next_; }
  // After the vote of `step`: the slowest rank's mean seconds per step since the previous vote.
  void voted(int64_t step, double slowest_step_s) { next_ = step + steps_between(slowest_step_s, bound_s_, log_every_); }
  // floor(bound_s / step_s), at least 1 and at most log_every (whose steps sync anyway).
  static int64_t steps_between(double step_s, double bound_s, int64_t log_every);

 private:
  int64_t log_every_;
  double bound_s_;
  int64_t next_ = 1;  // the first step votes, and measures
};

}  // namespace keel
