// `keel replay RUN_DIR --step N [--steps K] [--branches ...]` (replay/replay.h).
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/commands.h"
#include "replay/numerics_diff.h"
#include "replay/replay.h"

namespace keel {

Command add_replay_command(CLI::App& app) {
  auto o = std::make_shared<ReplayOptions>();
  auto no_plots = std::make_shared<bool>(false);
  auto numerics = std::make_shared<bool>(false);
  auto threshold = std::make_shared<double>(0.1);
  auto* cmd = app.add_subcommand(
      "replay", "why did a spike happen? fork a run from its checkpoint before step N into branches (identical, "
                "batches skipped, another data order, LR halved, higher precision) and see which spike again");
  cmd->add_option("run", o->run_dir, "the run directory (keel train's)")->required();
  cmd->add_option("--step", o->step, "the spike's step")->required();
  cmd->add_option("--steps", o->steps, "steps each branch runs past the spike")->capture_default_str();
  cmd->add_option("--from", o->from, "the checkpoint step to fork from (default: the newest before --step)");
  cmd->add_option("--branches", o->branches, "branches to run (default all): identical skip reorder lr_half precision")
      ->delimiter(',');
  cmd->add_option("--skip-batches", o->skip_batches,
                  "skip branch: batches skipped after the checkpoint; 0 = through the spike's step")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads per branch; 0 = all cores")->capture_default_str();
  cmd->add_flag("--no-plots", *no_plots, "do not draw plots/replay.png");
  cmd->add_option("--python", o->python, "Python interpreter for the plot (default: $KEEL_PYTHON, then .venv)");
  cmd->add_flag("--numerics", *numerics,
                "instead of branches: the same steps in the run's precision and in higher ones, compared layer by "
                "layer (replay/numerics_diff.h); --steps past --step, default 2");
  cmd->add_option("--threshold", *threshold, "--numerics: the relative difference that counts")->capture_default_str();
  return [cmd, o, no_plots, numerics, threshold]() -> int {
    if (!*cmd) return -1;
    if (*numerics) {
      NumericsOptions n;
      n.run_dir = o->run_dir;
      n.step = o->step;
      n.steps = cmd->count("--steps") ? o->steps : 2;
      n.from = o->from;
      n.threshold = *threshold;
      n.threads = o->threads;
      return run_numerics_diff(n);
    }
    o->plots = !*no_plots;
    return run_replay(*o);
  };
}

}  // namespace keel
