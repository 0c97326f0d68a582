// `keel sweep SWEEP.yaml` and `keel report SWEEP_DIR` (src/sweep/).
#include <CLI/CLI.hpp>

#include <cmath>
#include <memory>

#include "cli/commands.h"
#include "analysis/run_compare.h"
#include "analysis/sweep_report.h"
#include "sweep/sweep_runner.h"
#include "util/error.h"
#include "util/utf8.h"

namespace keel {

namespace {

// A value that ends up in a JSON file (sweep.json's command line and paths,
// compare's runs.json) must be UTF-8, or writing that file fails after the
// directory was made. Checked before anything is created, naming the option.
void add_if_not_utf8(ConfigErrors& e, const std::string& option, const std::string& value, const std::string& why) {
  if (const size_t bad = first_invalid_utf8(value); bad != std::string::npos)
    e.add(option, "is not valid UTF-8 (byte " + std::to_string(bad) + " of the value): " + why +
                      ", and JSON holds only UTF-8; use a UTF-8 path or value");
}

void throw_if_any(const ConfigErrors& e) {
  if (!e.empty()) throw ConfigError(e);
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  struct Args {
    std::string path;
    SweepOptions options;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("sweep", "run every point of a sweep file (a grid of training runs); resumable");
  auto& o = args->options;
  cmd->add_option("sweep", args->path, "sweep file (YAML): base config, grid, seeds")->required();
  cmd->add_option("--parallel", o.parallel, "points running at once (the cores are split)")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads per point; 0 = cores / --parallel")->capture_default_str();
  cmd->add_option("--out", o.out_dir, "sweep directory (default: the file's out_dir)");
  cmd->add_option("--set", o.overrides, "override a key of every point (repeatable)");
  cmd->add_option("--only", o.only, "run only points whose names match this glob (repeatable)");
  cmd->add_flag("--dry-run", o.dry_run, "print the points and what would run, run nothing");
  cmd->add_option("--progress-every", o.progress_every_s, "seconds between progress lines")->capture_default_str();
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    args->options.command_line = invocation();  // recorded in the sweep's manifest
    const SweepOptions& o = args->options;
    const std::string why = "sweep.json records the command line";
    ConfigErrors e;
    add_if_not_utf8(e, "--out", o.out_dir, "it becomes every point's run.out_dir, and sweep.json records it");
    add_if_not_utf8(e, "sweep", args->path, "sweep.json records the sweep file");
    for (const auto& v : o.overrides) add_if_not_utf8(e, "--set", v, why);
    for (const auto& v : o.only) add_if_not_utf8(e, "--only", v, why);
    if (e.empty()) add_if_not_utf8(e, "the command line", o.command_line, why);
    throw_if_any(e);
    return run_sweep(args->path, args->options);
  };
}

Command add_report_command(CLI::App& app) {
  struct Args {
    std::string dir;
    ReportOptions options;
    bool no_plots = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("report", "summary.csv, LR sensitivity, plots and report.md for a sweep directory");
  cmd->add_option("sweep_dir", args->dir, "sweep directory (holds sweep.json)")->required();
  cmd->add_option("--out", args->options.out_dir, "write the report here instead of SWEEP_DIR");
  cmd->add_flag("--no-plots", args->no_plots, "only the CSVs and report.md");
  cmd->add_option("--python", args->options.python, "Python with matplotlib (default: .venv/bin/python)");
  cmd->add_option("--degradation-margin", args->options.degradation_margin,
                  "nats above the best lower-LR run at which a run counts as degraded (default 0.1)");
  cmd->add_option("--target-width", args->options.target_width,
                  "d_model the stability edge across width is extrapolated to (default 1024: Rybakov et al.'s model)");
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    args->options.plots = !args->no_plots;
    if (!(args->options.target_width >= 1) || !std::isfinite(args->options.target_width)) {
      ConfigErrors e;
      e.add("--target-width", "expected a width of 1 or more, got " + std::to_string(args->options.target_width));
      throw ConfigError(e);
    }
    if (!(args->options.degradation_margin > 0) || !std::isfinite(args->options.degradation_margin)) {
      ConfigErrors e;
      e.add("--degradation-margin", "expected a positive number of nats, got " +
                                        std::to_string(args->options.degradation_margin));
      throw ConfigError(e);
    }
    return write_report(args->dir, args->options);
  };
}

Command add_compare_command(CLI::App& app) {
  struct Args {
    std::vector<std::string> dirs;
    CompareOptions options;
    bool no_plots = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("compare", "runs side by side: final/best losses, divergence, spikes, logits, "
                                            "the config keys they differ in, and their curves");
  cmd->add_option("run_dirs", args->dirs, "run directories (finished, still training, or sweep points)")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--out", args->options.out_dir, "write compare.md, compare.csv and plots/ here (default: table only)");
  cmd->add_flag("--no-plots", args->no_plots, "with --out: only the table and the CSV");
  cmd->add_option("--python", args->options.python, "Python with matplotlib (default: .venv/bin/python)");
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    args->options.plots = !args->no_plots;
    ConfigErrors e;
    if (!args->options.out_dir.empty())  // without --out nothing is written
      for (const auto& d : args->dirs) add_if_not_utf8(e, "run_dirs", d, "runs.json (--out) records each run directory");
    throw_if_any(e);
    return compare_runs(args->dirs, args->options);
  };
}

}  // namespace keel
