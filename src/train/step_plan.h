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
  bool monitor = false;       // attention and output-logit statistics (monitor.every), in the record
  bool checkpoint = false;    // periodic save (checkpoint.every), or the last step with checkpoint.at_end
  bool host_sync = false;     // read the device counters: non-finite steps, the stop vote
  bool drain_spikes = false;  // hand queued loss / grad-norm values to the spike detector

  // A stop (signal, --stop-after-step) after this step: it is logged,
  // checkpointed and its spikes are judged, whatever the cadences said.
  void stop() { log = drain_spikes = checkpoint = true; }
};

// `index` is the 0-based step index; `cpu`: the host reads device values
// for free, so it checks every step; `has_val`: a validation split exists.
StepPlan plan_step(const Config& cfg, int64_t index, bool cpu, bool has_val);

}  // namespace keel
