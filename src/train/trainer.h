// `keel train`: the training loop, top to bottom in trainer.cpp.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace keel {

struct TrainOptions {
  std::string resume;  // "" (fresh), "auto" (newest valid checkpoint, else fresh), or a checkpoint path
  int64_t stop_after_step = 0;  // > 0: stop cleanly after this step (save, summary), as a signal would
  // A fork of a run (keel replay's branches, src/replay/replay.h), with
  // --resume PATH: config keys this resume may change beyond those any
  // resume may, and "AFTER:COUNT" batch skips added to the checkpoint's own.
  std::vector<std::string> fork_changes;
  std::vector<std::string> fork_skips;
};

// Exit codes (util/error.h): 0 done or stopped by --stop-after-step, 2 bad
// input, 3 stopped by its own rule (non-finite, divergence, max rewinds), 4
// environment, 128 + the signal after a clean stop on SIGINT/SIGTERM.
int run_training(const Config& config, const TrainOptions& options);

}  // namespace keel
