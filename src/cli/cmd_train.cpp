// `keel train CONFIG [--set k=v] [--resume auto|PATH] [--stop-after-step N]`.
#include <CLI/CLI.hpp>

#include <memory>

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
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    return run_training(load_config(args->config.path, args->config.overrides), args->options);
  };
}

}  // namespace keel
