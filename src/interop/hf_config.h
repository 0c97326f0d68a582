// config.json and generation_config.json of a Hugging Face model, written
// from a keel ModelConfig (export) and read back into one (import).
//
// Field names and defaults follow transformers 5.x (configuration_llama.py,
// configuration_qwen3.py, configuration_olmo2.py, configuration_gemma2.py,
// configuration_gemma3.py). RoPE is written both as rope_parameters (5.x) and
// as the legacy rope_theta (4.x), which 5.x folds into rope_parameters.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "config/config.h"
#include "interop/hf_mapping.h"

namespace keel {

struct HfTokenIds {
  int64_t bos = -1, eos = -1, pad = -1;  // -1: none (written as null)
};

// config.json for `m` as `family` (from hf_family_for). `dtype`: float32 |
// bfloat16 | float16, the dtype of the exported weights.
nlohmann::ordered_json hf_config_json(const ModelConfig& m, HfFamily family, const HfTokenIds& ids,
                                      const std::string& dtype);
nlohmann::ordered_json hf_generation_config_json(const HfTokenIds& ids);

struct HfImportedConfig {
  HfFamily family = HfFamily::llama;
  ModelConfig model;
  HfTokenIds ids;
  std::vector<std::string> notes;  // what import chose on the user's behalf (printed)
};

// A keel ModelConfig that computes what the Hugging Face config describes.
// `max_seq_len` > 0 overrides model.max_seq_len; 0 takes
// max_position_embeddings, capped at 8192 (RoPE tables are built for it) and
// at the sliding window of any sliding-window layer (keel attends to the whole
// context, which equals a sliding window only up to its length). Throws
// ConfigError naming every config.json field that keel cannot represent.
HfImportedConfig model_config_from_hf(const nlohmann::json& config, int64_t max_seq_len = 0);

}  // namespace keel
