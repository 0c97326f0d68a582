// `keel launch --nproc N -- train CONFIG ...` (see distributed/launcher.h).
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/commands.h"
#include "distributed/launcher.h"

namespace keel {

Command add_launch_command(CLI::App& app) {
  auto options = std::make_shared<LaunchOptions>();
  auto* cmd = app.add_subcommand("launch", "start N local data-parallel workers: keel launch --nproc 2 -- train CONFIG");
  cmd->add_option("--nproc", options->nproc, "number of workers (ranks) on this machine")->required();
  cmd->add_option("--master-addr", options->master_addr, "rendezvous address")->capture_default_str();
  cmd->add_option("--master-port", options->master_port, "rendezvous port; 0 = any free port")->capture_default_str();
  cmd->add_option("--grace", options->grace_s, "seconds the others get to exit after one worker fails")
      ->capture_default_str();
  cmd->add_option("command", options->worker_args, "the keel command each worker runs, after --")->required();
  return [cmd, options]() -> int { return *cmd ? launch_workers(*options) : -1; };
}

}  // namespace keel
