// `keel average RUN_DIR --last N`: the mean of a run's newest N checkpoints,
// as a run of its own (src/train/checkpoint_average.h).
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "train/checkpoint_average.h"

namespace keel {

Command add_average_command(CLI::App& app) {
  struct Args {
    std::string run_dir, out;
    int64_t last = 0;
    bool force = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("average", "the mean of a run's newest N checkpoints' weights (OLMo-core's "
                                            "checkpoint averaging), as a run keel eval, export-hf and sample read");
  cmd->add_option("run_dir", args->run_dir, "run directory (runs/NAME)")->required();
  cmd->add_option("--last", args->last, "how many of the newest valid checkpoints to average")->required();
  cmd->add_option("--out", args->out, "run directory to write (default RUN_DIR/averages/last<N>_step<S>)");
  cmd->add_flag("--force", args->force, "write into a non-empty --out (its other files stay)");
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    const AverageResult r = average_checkpoints(args->run_dir, args->last, args->out, args->force);
    std::cout << "averaged the weights of " << r.steps.size() << " checkpoint(s) of " << args->run_dir << " (steps";
    for (int64_t s : r.steps) std::cout << " " << s;
    std::cout << ") into " << r.checkpoint << "\n"
              << "evaluate it with keel eval " << r.out_dir << ", export it with keel export-hf " << r.out_dir
              << " OUT_DIR\n";
    return 0;
  };
}

}  // namespace keel
