// Which weights of a checkpoint a command reads (keel eval, export-hf,
// sample --weights): "live", the trained weights (model.safetensors), or
// "ema", train.ema_decay's moving average of them (ema.safetensors).
#pragma once

#include <string>

#include "util/error.h"

namespace keel {

// Throws ConfigError (key `flag`) unless `which` is live or ema: what a
// command checks before it reads or writes anything.
inline void check_weights_choice(const std::string& which, const std::string& flag = "--weights") {
  if (which == "live" || which == "ema") return;
  ConfigErrors e;
  e.add(flag, "is '" + which + "'; expected live (the trained weights) or ema (their moving average)");
  throw ConfigError(e);
}

}  // namespace keel
