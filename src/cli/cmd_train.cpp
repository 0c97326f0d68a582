// `keel train CONFIG [--set k=v] [--resume auto|PATH] [--stop-after-step N]`.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "config/config.h"
#include "train/trainer.h"

namespace keel {

Command add_train_command(CLI::App& app) {
  struct Args {
    ConfigArgs config;
    TrainOptions options;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("train", "train a model; progress, metrics and checkpoints go to runs/<name>/");
  add_config_args(cmd, args->config);
  cmd->add_option("--resume", args->options.resume,
                  "auto (newest valid checkpoint of the run, else fresh) or a checkpoint path");
  cmd->add_option("--stop-after-step", args->options.stop_after_step,
                  "stop cleanly after this step (checkpoint + summary), as SIGTERM would");
  cmd->add_option("--fork-change", args->options.fork_changes,
                  "with --resume PATH: a config key this fork may change although it changes what the run computes "
                  "(keel replay's branches: train.lr, run.seed, train.precision); repeatable");
  cmd->add_option("--fork-skip", args->options.fork_skips,
                  "with --resume PATH: AFTER:COUNT, skip COUNT batches after step AFTER, on top of the checkpoint's "
                  "own skips (keel replay's skip branch); repeatable");
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    const TrainOptions& o = args->options;
    ConfigErrors errors;
    const bool fork = !o.fork_changes.empty() || !o.fork_skips.empty();
    if (fork && (o.resume.empty() || o.resume == "auto"))
      errors.add("--fork-change/--fork-skip", "need --resume PATH: a fork starts from a named checkpoint");
    Config scratch;
    const Schema schema = make_schema(scratch);
    for (const auto& key : o.fork_changes)
      if (!schema.find(key)) errors.add("--fork-change " + key, "unknown config key");
    ConfigErrors skips;  // named as the option, not as data.skip_batches
    parse_skip_batches(o.fork_skips, &skips);
    for (auto item : skips.items) errors.items.push_back(item.replace(0, std::string("data.skip_batches").size(), "--fork-skip"));
    if (!errors.empty()) throw ConfigError(errors);
    return run_training(load_config(args->config.path, args->config.overrides), o);
  };
}

}  // namespace keel
