// train.init_from: a fresh run whose weights come from an existing checkpoint
// (typically one written by `keel import-hf`) instead of random init. Only the
// weights are taken: optimizer moments, step, data position and RNG start anew.
#pragma once

#include <string>

#include "config/config.h"
#include "model/transformer.h"

namespace keel {

// model.* keys that may differ between the checkpoint and the run: they change
// no parameter and no computation on sequences both can hold.
bool init_from_may_differ(const std::string& key);

// Resolves `config.train.init_from` (checkpoint or run directory), checks that
// its model.* keys equal `config`'s (else ConfigError naming each differing
// key), and copies its weights into `model`. Returns the checkpoint directory.
std::string load_init_weights(const Config& config, Transformer& model);

}  // namespace keel
