// keel's subcommands. Each add_*_command registers its subcommand, options
// and help on `app` and returns a Command: after parsing, main() calls every
// Command; the one whose subcommand was given runs and returns its exit code
// (util/error.h), the others return -1. Errors propagate as exceptions to
// main(), which maps them to exit codes in one place.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI { class App; }

namespace keel {

using Command = std::function<int()>;

Command add_validate_command(CLI::App& app);  // cmd_config.cpp
Command add_config_command(CLI::App& app);    // cmd_config.cpp: keel config --describe
Command add_smoke_command(CLI::App& app);
Command add_prepare_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
Command add_sample_command(CLI::App& app);
Command add_eval_command(CLI::App& app);  // cmd_eval.cpp
Command add_average_command(CLI::App& app);  // cmd_average.cpp
Command add_sweep_command(CLI::App& app);   // cmd_sweep.cpp
Command add_report_command(CLI::App& app);  // cmd_sweep.cpp
Command add_compare_command(CLI::App& app);  // cmd_sweep.cpp
Command add_replay_command(CLI::App& app);   // cmd_replay.cpp
Command add_export_hf_command(CLI::App& app);  // cmd_hf.cpp
Command add_import_hf_command(CLI::App& app);  // cmd_hf.cpp
Command add_bench_command(CLI::App& app);
Command add_params_command(CLI::App& app);  // cmd_params.cpp
Command add_plan_command(CLI::App& app);    // cmd_plan.cpp
Command add_coordcheck_command(CLI::App& app);  // cmd_coordcheck.cpp
Command add_tokenize_command(CLI::App& app);  // cmd_tokenize.cpp

// The command line keel was started with ("keel sweep x.yaml --parallel 2"),
// set by main() before any command runs.
void set_invocation(int argc, char** argv);
const std::string& invocation();

// The CONFIG argument and --set overrides that most subcommands take.
struct ConfigArgs {
  std::string path;
  std::vector<std::string> overrides;
};
void add_config_args(CLI::App* cmd, ConfigArgs& args);

}  // namespace keel
