// `keel sample RUN_DIR_OR_CHECKPOINT --prompt "..."`: text from a trained model.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "checkpoint/checkpoint_resolve.h"
#include "cli/commands.h"
#include "data/tokenizer.h"
#include "model/generate.h"
#include "model/init.h"
#include "train/train_state.h"
#include "util/error.h"

namespace keel {


static int run_sample(const std::string& path, const std::string& prompt, const SampleOptions& options,
                      const std::string& weights) {
  check_weights_choice(weights);
  {
    const std::string dir = resolve_checkpoint_for_command(path);  // a run directory: its newest valid one
    Config config = checkpoint_config(dir);
    Transformer model(config.model);
    load_checkpoint_weights(dir, model, weights);
    const std::string tokenizer_path = checkpoint_tokenizer(dir);
    if (tokenizer_path.empty())
      throw CheckpointError(dir + " holds no tokenizer.model or tokenizer.json: keel sample needs the tokenizer");
    Tokenizer tokenizer(tokenizer_path);
    // As it was trained: a document-masked model reads an EOS as a document start.
    if (config.data.document_mask) model->set_documents({tokenizer.eos_id(), config.data.resets_positions()});
    std::vector<int64_t> ids;
    for (int32_t id : tokenizer.encode(prompt)) ids.push_back(id);
    if (ids.empty()) ids.push_back(tokenizer.eos_id());  // an empty prompt starts a new document
    SampleOptions o = options;
    o.stop_id = tokenizer.eos_id();
    auto out = generate(model, ids, o);
    std::cout << prompt << tokenizer.decode(out) << std::endl;
    return 0;
  }
}

Command add_sample_command(CLI::App& app) {
  struct Args {
    std::string path, prompt, weights = "live";
    SampleOptions options;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("sample", "generate text from a run's newest checkpoint (or a given one)");
  auto& o = args->options;
  cmd->add_option("checkpoint", args->path, "run directory (runs/NAME) or checkpoint directory")->required();
  cmd->add_option("--prompt", args->prompt, "text to continue");
  cmd->add_option("--tokens", o.max_new_tokens, "new tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", o.temperature, "softmax temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", o.top_k, "sample from the k most likely tokens; 0 = all")->capture_default_str();
  cmd->add_option("--seed", o.seed, "same seed, same text")->capture_default_str();
  cmd->add_option("--weights", args->weights, "live (the trained weights) or ema (train.ema_decay's average)")
      ->capture_default_str();
  return [cmd, args]() -> int {
    return *cmd ? run_sample(args->path, args->prompt, args->options, args->weights) : -1;
  };
}

}  // namespace keel
