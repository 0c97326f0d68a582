// `keel train CONFIG [--set k=v] [--resume auto|PATH]`.
#include <iostream>

#include "checkpoint/checkpoint_error.h"
#include "cli/commands.h"
#include "config/config.h"
#include "data/data_error.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace keel {

int cmd_train(const std::string& path, const std::vector<std::string>& overrides, const std::string& resume,
              int64_t stop_after_step) {
  Config config;
  try {
    config = load_config(path, overrides);
  } catch (const ConfigError& e) {
    return report_config_error(e.what());
  }
  try {
    TrainOptions options;
    options.resume = resume;
    options.stop_after_step = stop_after_step;
    return run_training(config, options);
  } catch (const DataError& e) {
    std::cerr << "keel: data error: " << e.what() << "\n";
    return 2;
  } catch (const CheckpointError& e) {
    std::cerr << "keel: checkpoint error: " << e.what() << "\n";
    return 2;
  } catch (const RunDirError& e) {
    std::cerr << "keel: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace keel
