// `keel train`: the training loop, top to bottom in trainer.cpp.
#pragma once

#include <string>

#include "config/config.h"

namespace keel {

struct TrainOptions {
  std::string resume;  // "" (fresh), "auto" (newest valid checkpoint, else fresh), or a checkpoint path
  int64_t stop_after_step = 0;  // > 0: stop cleanly after this step (save, summary), as a signal would
};

// Exit codes: 0 done (or stopped cleanly by a signal), 2 bad input, 3 halted
// on a non-finite loss or gradient.
int run_training(const Config& config, const TrainOptions& options);

// Set by SIGINT/SIGTERM; the loop finishes its step and stops cleanly.
void install_stop_handlers();
bool stop_requested();

}  // namespace keel
