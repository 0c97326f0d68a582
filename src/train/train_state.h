// What a checkpoint holds for exact resume (docs/papers.md#checkpoint-and-resume): model weights,
// optimizer moments and step counters, step and tokens, RNG states, the data
// position (the loader is a pure function of the step), the resolved config,
// keel and LibTorch versions. Stored through CheckpointStore as
//   model.safetensors      weights by parameter name (readable by Python's safetensors)
//   optimizer.safetensors  exp_avg.* / exp_avg_sq.* / step.*
//   rng.safetensors        CPU (and CUDA) generator states
//   tokenizer.model        the SentencePiece model the run was trained with, or
//   tokenizer.json         the Hugging Face byte-level BPE tokenizer it reused
//   state.json             step, tokens, config, versions, extra trainer state
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "checkpoint/weights_choice.h"
#include "config/config.h"
#include "model/transformer.h"
#include "optim/optimizer.h"

namespace keel {

struct TrainState {
  int64_t step = 0;            // optimizer steps completed
  int64_t tokens = 0;          // tokens consumed
  nlohmann::json extra;        // trainer/monitor state (best val loss, spike detector, ...)
  // Generator states to save; empty = this process's (local_rng_state()).
  // Data-parallel runs store rank 0's as "cpu", "cuda0", ... and rank r's as
  // "rank<r>.cpu", ...
  std::vector<std::pair<std::string, torch::Tensor>> rng;
  // train.ema_decay's average of the weights (train/weight_ema.h), written
  // to ema.safetensors; empty: no such file.
  std::vector<std::pair<std::string, torch::Tensor>> ema;
};

// This process's CPU (and CUDA) generator states: {"cpu", state}, {"cuda0", state}, ...
std::vector<std::pair<std::string, torch::Tensor>> local_rng_state();

// Writes a checkpoint for `state.step`. Refuses (std::runtime_error) when any
// weight is non-finite: such a checkpoint would poison every resume.
std::string save_training_checkpoint(const std::string& run_dir, const Config& config, Transformer& model,
                                     const Optimizer* optimizer, const TrainState& state,
                                     const std::string& tokenizer_path);

// Loads weights (and optimizer state and RNG when given) from a checkpoint
// directory. Returns the state; the checkpoint's config is in *saved_config.
// rng_rank: whose generator states to restore (rank r of a data-parallel
// run); a rank the checkpoint has none for keeps its seeded generators.
TrainState load_training_checkpoint(const std::string& checkpoint_dir, Transformer& model, Optimizer* optimizer,
                                    std::string* saved_config_yaml, int rng_rank = 0);

// Which weights of a checkpoint keel eval, export-hf and sample read:
// "live" (model.safetensors) or "ema" (the weight EMA, ema.safetensors, over
// the live ones). Throws CheckpointError naming a missing ema.safetensors and
// ConfigError for another name (key: `flag`).
void load_checkpoint_weights(const std::string& checkpoint_dir, Transformer& model, const std::string& which,
                             const std::string& flag = "--weights");
// A checkpoint's ema.safetensors, or {} when it has none.
std::vector<std::pair<std::string, torch::Tensor>> load_checkpoint_ema(const std::string& checkpoint_dir);

// Resolved-config differences between a checkpoint and the current run.
struct ConfigDiff {
  std::vector<std::string> refused;  // "model.d_model: 128 -> 256"
  std::vector<std::string> allowed;  // "train.max_steps: 600 -> 1200"
};
ConfigDiff diff_for_resume(const Config& saved, const Config& current, const std::vector<std::string>& also_allowed = {});

// Config stored in a checkpoint's state.json.
Config checkpoint_config(const std::string& checkpoint_dir);

// checkpoint_dir/tokenizer.model or checkpoint_dir/tokenizer.json, whichever
// it holds, or "" (a checkpoint imported without a tokenizer).
std::string checkpoint_tokenizer(const std::string& checkpoint_dir);

}  // namespace keel
