// `keel train CONFIG [--set k=v] [--resume auto|PATH]`.
#include "checkpoint/checkpoint_error.h"
#include "cli/commands.h"
#include "config/config.h"
#include "train/trainer.h"

namespace keel {

int cmd_train(const std::string& path, const std::vector<std::string>& overrides, const std::string& resume,
              int64_t stop_after_step) {
  TrainOptions options;
  options.resume = resume;
  options.stop_after_step = stop_after_step;
  return run_training(load_config(path, overrides), options);
}

}  // namespace keel
