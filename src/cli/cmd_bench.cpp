// `keel bench CONFIG [--set k=v ...] [--steps N] [--warmup W] [--json PATH]
// [--peak-tflops X] [--breakdown-steps K] [--random-data]`: times keel's
// training step (src/train/bench.h) and writes a JSON record.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "config/config.h"
#include "train/bench.h"
#include "util/fs.h"

namespace keel {

Command add_bench_command(CLI::App& app) {
  struct State {
    std::string config_path;
    std::vector<std::string> overrides;
    BenchOptions options;
  };
  auto state = std::make_shared<State>();
  auto* cmd = app.add_subcommand("bench", "time the training step: tokens/s, ms/step, MFU, memory, phase breakdown");
  cmd->add_option("config", state->config_path, "run configuration (YAML)")->required();
  cmd->add_option("--set", state->overrides, "override a key: --set model.qk_norm.type=rms (repeatable)");
  cmd->add_option("--steps", state->options.steps, "timed steps")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", state->options.warmup, "untimed steps first")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--breakdown-steps", state->options.breakdown_steps,
                  "extra steps timed phase by phase (a device sync after each phase); 0 = none")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--monitor-repeats", state->options.monitor_repeats,
                  "monitoring forwards timed to cost monitor.every; 0 = skip")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", state->options.json_path, "write the record here (default <run.out_dir>/bench/<config>.json)");
  cmd->add_option("--peak-tflops", state->options.peak_tflops,
                  "peak TFLOP/s of this device for MFU (default: data-sheet bf16 peak of known GPUs, "
                  "measured fp32 matmul on CPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-op-count{false}", state->options.count_ops,
                "skip the extra step whose operators are counted (kernel launches per step)");
  cmd->add_flag("--random-data", state->options.random_data,
                "uniform random tokens instead of data.dir (no data preparation)");
  return [cmd, state]() -> int {
    if (!*cmd) return -1;
    Config config = load_config(state->config_path, state->overrides);
    std::string name = base_name(state->config_path);
    if (auto dot = name.rfind('.'); dot != std::string::npos && dot > 0) name = name.substr(0, dot);
    state->options.config_name = name;
    run_bench(config, state->options);
    return 0;
  };
}

}  // namespace keel
