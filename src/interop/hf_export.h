// `keel export-hf` and `keel import-hf`: a keel checkpoint as a Hugging Face
// model directory that transformers loads with no custom code, and back.
#pragma once

#include <string>
#include <vector>

#include "interop/hf_mapping.h"

namespace keel {

struct HfExportOptions {
  std::string dtype = "float32";  // float32 | bfloat16 | float16
  bool force = false;             // write into a non-empty directory, replacing keel's files there
  std::string weights = "live";   // live | ema (train.ema_decay's average: the checkpoint's ema.safetensors)
};

struct HfExportResult {
  std::string checkpoint_dir;     // the checkpoint that was read
  HfFamily family = HfFamily::llama;
  std::vector<std::string> files; // written, in order
  int64_t tensors = 0;
};

// Writes model.safetensors (Hugging Face names), config.json,
// generation_config.json, tokenizer.model, tokenizer.json,
// tokenizer_config.json and special_tokens_map.json into `out_dir` (the
// tokenizer files only when the checkpoint has a tokenizer.model; a warning
// says so otherwise).
// `checkpoint` is a checkpoint or run directory (its newest valid checkpoint).
// Throws ConfigError (model keys no class represents), CheckpointError,
// InteropError (output directory occupied, tokenizer not expressible).
HfExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, const HfExportOptions& options);

struct HfImportOptions {
  int64_t max_seq_len = 0;  // 0: from config.json (see model_config_from_hf)
  bool force = false;       // write into a non-empty directory
};

struct HfImportResult {
  HfFamily family = HfFamily::llama;
  std::string checkpoint_dir;  // <out>/checkpoints/step_00000000
  std::string config_path;     // <out>/config.yaml
  bool has_tokenizer = false;  // tokenizer.model found and copied
  std::vector<std::string> notes;
};

// Reads config.json and model.safetensors (or a sharded
// model.safetensors.index.json) of a mapped class and writes `out_dir` as a
// keel run directory: checkpoints/step_00000000/ (weights in fp32, the
// tokenizer.model if the model has one, state.json) and config.yaml, a full
// keel config whose train.init_from is `out_dir` and whose data.tokenizer is
// the imported tokenizer, so `keel train <out>/config.yaml` continues
// pretraining from the imported weights. Throws ConfigError (config.json
// fields keel cannot represent), CheckpointError, InteropError.
HfImportResult import_hf(const std::string& hf_dir, const std::string& out_dir, const HfImportOptions& options);

}  // namespace keel
