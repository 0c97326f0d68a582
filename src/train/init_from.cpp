#include "train/init_from.h"

#include "checkpoint/checkpoint_resolve.h"
#include "train/train_state.h"

namespace keel {

bool init_from_may_differ(const std::string& key) {
  // max_seq_len sizes the RoPE tables only; init.* and the l2 temperature's
  // initial value are overwritten by the loaded weights.
  return key == "model.max_seq_len" || key.rfind("model.init.", 0) == 0 ||
         key == "model.qk_norm.temperature_init" || key == "model.qk_norm.henry_seq_len";
}

std::string load_init_weights(const Config& config, Transformer& model) {
  const std::string dir = resolve_checkpoint_dir(config.train.init_from);
  Config saved = checkpoint_config(dir), current = config;
  Schema a = make_schema(saved), b = make_schema(current);
  ConfigErrors errors;
  for (size_t i = 0; i < a.keys().size(); ++i) {
    const auto& key = a.keys()[i];
    if (key.path.rfind("model.", 0) != 0 || init_from_may_differ(key.path)) continue;
    const std::string was = a.value_string(key), now = b.value_string(b.keys()[i]);
    if (was != now)
      errors.add(key.path, now + " differs from " + was + " in train.init_from = " + dir +
                               " (set it to the checkpoint's value)");
  }
  if (!errors.empty()) throw ConfigError(errors);
  load_training_checkpoint(dir, model, nullptr, nullptr);
  return dir;
}

}  // namespace keel
