#include "train/checkpoint_average.h"

#include <map>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/safetensors.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/fs.h"

namespace keel {

std::string default_average_dir(const std::string& run_dir, int64_t last, int64_t newest_step) {
  return run_dir + "/averages/last" + std::to_string(last) + "_step" + std::to_string(newest_step);
}

AverageResult average_checkpoints(const std::string& run_dir, int64_t last, const std::string& out_dir_in,
                                  bool force) {
  if (last < 1) {
    ConfigErrors e;
    e.add("--last", std::to_string(last) + ": average at least one checkpoint");
    throw ConfigError(e);
  }
  if (!path_exists(run_dir + "/checkpoints"))
    throw RunDirError(run_dir + " is not a keel run directory with checkpoints (no checkpoints/)");
  std::vector<std::string> rejected;
  const auto all = CheckpointStore(run_dir).list_valid(VerifyLevel::checksums, &rejected);
  if (static_cast<int64_t>(all.size()) < last) {
    std::string steps;
    for (const auto& [s, d] : all) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
    ConfigErrors e;
    e.add("--last", std::to_string(last) + ", but " + run_dir + " has " + std::to_string(all.size()) +
                        " valid checkpoint(s)" + (steps.empty() ? "" : " (steps " + steps + ")") +
                        (rejected.empty() ? "" : "; invalid: " + rejected.front()));
    throw ConfigError(e);
  }
  const std::vector<std::pair<int64_t, std::string>> chosen(all.end() - last, all.end());
  const std::string& newest = chosen.back().second;
  const std::string out_dir = out_dir_in.empty() ? default_average_dir(run_dir, last, chosen.back().first) : out_dir_in;
  if (path_exists(out_dir) && !list_directory(out_dir).empty() && !force)
    throw RunDirError(out_dir + " exists and is not empty: choose another --out, or --force to write a checkpoint "
                                "into it (its other files stay)");

  // The newest checkpoint's model (its buffers, its config), then the mean of every parameter.
  Config cfg = checkpoint_config(newest);
  Transformer model(cfg.model);
  const TrainState newest_state = load_training_checkpoint(newest, model, nullptr, nullptr);
  std::map<std::string, torch::Tensor> sums;
  for (const auto& [step, dir] : chosen) {
    const std::string file = dir + "/model.safetensors";
    std::map<std::string, torch::Tensor> weights;
    for (auto& [name, t] : read_safetensors(file)) weights[name] = t;
    for (auto& p : model->named_parameters(true)) {
      auto it = weights.find(p.key());
      if (it == weights.end()) throw CheckpointError(file + ": no tensor '" + p.key() + "' (a different architecture?)");
      if (it->second.sizes() != p.value().sizes())
        throw CheckpointError(file + ": tensor '" + p.key() + "' has shape " + c10::str(it->second.sizes()) +
                              ", the newest checkpoint's has " + c10::str(p.value().sizes()));
      auto wide = it->second.to(torch::kFloat64);
      auto [slot, fresh] = sums.emplace(p.key(), wide);
      if (!fresh) slot->second.add_(wide);
    }
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters(true))
      p.value().copy_(sums.at(p.key()) / static_cast<double>(chosen.size()));
  }
  TrainState state;
  state.step = newest_state.step;
  state.tokens = newest_state.tokens;
  AverageResult result;
  result.out_dir = out_dir;
  for (const auto& [step, dir] : chosen) result.steps.push_back(step);
  state.extra = {{"averaged", {{"from", run_dir}, {"steps", result.steps}}}};
  ensure_directory(out_dir);
  result.checkpoint = save_training_checkpoint(out_dir, cfg, model, nullptr, state, checkpoint_tokenizer(newest));
  return result;
}

}  // namespace keel
