// Subcommand entry points. Each returns the process exit code:
// 0 ok, 2 bad input (config, files), 3 training halted on a non-finite value.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace CLI { class App; }

namespace keel {

int cmd_validate(const std::string& config_path, const std::vector<std::string>& overrides);
int cmd_describe(bool markdown);
int cmd_smoke(const std::string& config_path, const std::vector<std::string>& overrides);
int cmd_train(const std::string& config_path, const std::vector<std::string>& overrides,
              const std::string& resume, int64_t stop_after_step);

struct LaunchOptions;
int cmd_launch(const LaunchOptions& options);

struct SampleOptions;
int cmd_sample(const std::string& path, const std::string& prompt, const SampleOptions& options);

// `keel sweep` runs a grid of training runs; `keel report` summarizes one
// (src/sweep/sweep_runner.h, src/sweep/sweep_report.h).
struct SweepOptions;
struct ReportOptions;
int cmd_sweep(const std::string& sweep_path, const SweepOptions& options);
int cmd_report(const std::string& sweep_dir, const ReportOptions& options);

// `keel export-hf` / `keel import-hf` (src/cli/cmd_hf.cpp): registers both on
// `app`; the returned function runs the one that was parsed and returns its
// exit code, or -1 when neither was.
std::function<int()> add_hf_commands(CLI::App& app);

// `keel bench` (src/cli/cmd_bench.cpp, src/train/bench.h): registers it on
// `app`; the returned function runs it when parsed and returns its exit code,
// or -1 when it was not.
std::function<int()> add_bench_command(CLI::App& app);

// Prints "error: ..." lines for a config problem and returns 2.
int report_config_error(const std::string& what);

}  // namespace keel
