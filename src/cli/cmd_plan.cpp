// `keel plan CONFIG [--set k=v ...] [--ranks N] [--memory GIB ...] [--device cuda|cpu] [--json]`:
// a dry run that prints what one rank of the run needs in memory (weights,
// gradients, optimizer state, replicated or ZeRO-1 sharded, activations per
// sequence under train.activation_checkpointing) and the largest
// micro-batch that fits each memory size (train/memory_plan.h). Nothing is
// allocated, so it answers for models far larger than this machine.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "train/memory_plan.h"

namespace keel {

namespace {

struct PlanArgs {
  ConfigArgs config;
  MemoryPlanOptions options;
  std::string device;  // "": from train.device (auto plans for CUDA)
  bool json = false;
};

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "memory per rank (parameters, optimizer state, activations) and the "
                                         "largest micro-batch that fits, without training");
  add_config_args(cmd, args->config);
  cmd->add_option("--ranks", args->options.ranks, "data-parallel ranks (ZeRO-1 shards over them)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--memory", args->options.memory_gib, "memory sizes in GiB to fit (repeatable)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e6));
  cmd->add_option("--device", args->device, "plan for cuda or cpu (default: train.device; auto is cuda)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  cmd->add_flag("--json", args->json, "as JSON");
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    const Config config = load_config(args->config.path, args->config.overrides);
    MemoryPlanOptions options = args->options;
    options.cuda = args->device.empty() ? config.train.device != DeviceChoice::cpu : args->device == "cuda";
    const MemoryPlan plan = plan_memory(config, options);
    std::cout << (args->json ? memory_plan_json(plan, options) + "\n" : format_memory_plan(plan, config, options));
    return 0;
  };
}

}  // namespace keel
