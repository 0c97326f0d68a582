// `keel sample RUN_DIR_OR_CHECKPOINT --prompt "..."`: text from a trained model.
#include <iostream>

#include "checkpoint/checkpoint_resolve.h"
#include "cli/commands.h"
#include "data/tokenizer.h"
#include "model/generate.h"
#include "model/init.h"
#include "train/train_state.h"

namespace keel {

// A run directory resolves to its newest valid checkpoint.
static std::string resolve_checkpoint(const std::string& path) {
  std::vector<std::string> rejected;
  std::string dir = resolve_checkpoint_dir(path, &rejected);
  for (const auto& r : rejected) std::cerr << "keel: skipping invalid checkpoint " << r << "\n";
  return dir;
}

int cmd_sample(const std::string& path, const std::string& prompt, const SampleOptions& options) {
  {
    const std::string dir = resolve_checkpoint(path);
    Config config = checkpoint_config(dir);
    Transformer model(config.model);
    load_training_checkpoint(dir, model, nullptr, nullptr);
    Tokenizer tokenizer(dir + "/tokenizer.model");
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

}  // namespace keel
