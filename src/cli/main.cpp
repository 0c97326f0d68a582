// keel: pretrain small language models and study why their training goes unstable.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cmd_prepare.h"
#include "checkpoint/checkpoint_error.h"
#include "cli/commands.h"
#include "config/config.h"
#include "data/data_error.h"
#include "dist/launcher.h"
#include "dist/process_group.h"
#include "train/run_dir.h"
#include "model/generate.h"
#include "sweep/sweep_report.h"
#include "sweep/sweep_runner.h"

int main(int argc, char** argv) {
  CLI::App app{"keel: pretrain small decoder-only transformers and study their stability"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("keel ") + KEEL_VERSION);

  std::string config_path;
  std::vector<std::string> overrides;
  auto add_config_args = [&](CLI::App* cmd) {
    cmd->add_option("config", config_path, "run configuration (YAML)")->required();
    cmd->add_option("--set", overrides, "override a key: --set train.lr=1e-3 (repeatable)");
  };

  auto* validate = app.add_subcommand("validate", "print the fully resolved config, or every error in it");
  add_config_args(validate);

  auto* config_cmd = app.add_subcommand("config", "describe every config key");
  bool describe = false;
  bool markdown = false;
  config_cmd->add_flag("--describe", describe, "print every key with type, default and description");
  config_cmd->add_flag("--markdown", markdown, "as a Markdown table (configs/README.md is made from it)");

  auto* smoke = app.add_subcommand("smoke", "build the model and run one forward/backward pass");
  add_config_args(smoke);

  auto* train = app.add_subcommand("train", "train a model; progress, metrics and checkpoints go to runs/<name>/");
  add_config_args(train);
  std::string resume;
  train->add_option("--resume", resume, "auto (newest valid checkpoint of the run, else fresh) or a checkpoint path");
  int64_t stop_after_step = 0;
  train->add_option("--stop-after-step", stop_after_step,
                    "stop cleanly after this step (checkpoint + summary), as SIGTERM would");

  auto* launch = app.add_subcommand("launch", "start N local data-parallel workers: keel launch --nproc 2 -- train CONFIG");
  keel::LaunchOptions launch_options;
  launch->add_option("--nproc", launch_options.nproc, "number of workers (ranks) on this machine")->required();
  launch->add_option("--master-addr", launch_options.master_addr, "rendezvous address")->capture_default_str();
  launch->add_option("--master-port", launch_options.master_port, "rendezvous port; 0 = any free port")
      ->capture_default_str();
  launch->add_option("--grace", launch_options.grace_s, "seconds the others get to exit after one worker fails")
      ->capture_default_str();
  launch->add_option("command", launch_options.worker_args, "the keel command each worker runs, after --")
      ->required();

  auto* prepare = app.add_subcommand("prepare", "train the tokenizer and write token shards for data.dir");
  add_config_args(prepare);
  keel::PrepareCliOptions prepare_options;
  prepare->add_flag("--force", prepare_options.force, "rebuild data.dir even if it exists");
  prepare->add_flag("--verify", prepare_options.verify, "only check an existing data.dir (checksums, token ids)");
  prepare->add_flag("--quiet", prepare_options.quiet, "no progress lines");

  auto* sample = app.add_subcommand("sample", "generate text from a run's newest checkpoint (or a given one)");
  std::string sample_path, prompt;
  keel::SampleOptions sample_options;
  sample->add_option("checkpoint", sample_path, "run directory (runs/NAME) or checkpoint directory")->required();
  sample->add_option("--prompt", prompt, "text to continue");
  sample->add_option("--tokens", sample_options.max_new_tokens, "new tokens to generate")->capture_default_str();
  sample->add_option("--temperature", sample_options.temperature, "softmax temperature; 0 = greedy")
      ->capture_default_str();
  sample->add_option("--top-k", sample_options.top_k, "sample from the k most likely tokens; 0 = all")
      ->capture_default_str();
  sample->add_option("--seed", sample_options.seed, "same seed, same text")->capture_default_str();

  auto* sweep = app.add_subcommand("sweep", "run every point of a sweep file (a grid of training runs); resumable");
  std::string sweep_path;
  keel::SweepOptions sweep_options;
  sweep->add_option("sweep", sweep_path, "sweep file (YAML): base config, grid, seeds")->required();
  sweep->add_option("--parallel", sweep_options.parallel, "points running at once (the cores are split)")
      ->capture_default_str();
  sweep->add_option("--threads", sweep_options.threads, "CPU threads per point; 0 = cores / --parallel")
      ->capture_default_str();
  sweep->add_option("--out", sweep_options.out_dir, "sweep directory (default: the file's out_dir)");
  sweep->add_option("--set", sweep_options.overrides, "override a key of every point (repeatable)");
  sweep->add_option("--only", sweep_options.only, "run only points whose names match this glob (repeatable)");
  sweep->add_flag("--dry-run", sweep_options.dry_run, "print the points and what would run, run nothing");
  sweep->add_option("--progress-every", sweep_options.progress_every_s, "seconds between progress lines")
      ->capture_default_str();

  auto* report = app.add_subcommand("report", "summary.csv, LR sensitivity, plots and report.md for a sweep directory");
  std::string report_dir;
  keel::ReportOptions report_options;
  bool no_plots = false;
  report->add_option("sweep_dir", report_dir, "sweep directory (holds sweep.json)")->required();
  report->add_option("--out", report_options.out_dir, "write the report here instead of SWEEP_DIR");
  report->add_flag("--no-plots", no_plots, "only the CSVs and report.md");
  report->add_option("--python", report_options.python, "Python with matplotlib (default: .venv/bin/python)");

  auto run_hf_command = keel::add_hf_commands(app);  // export-hf, import-hf
  auto run_bench_command = keel::add_bench_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (int rc = run_hf_command(); rc >= 0) return rc;
    if (int rc = run_bench_command(); rc >= 0) return rc;
    if (*validate) return keel::cmd_validate(config_path, overrides);
    if (*config_cmd) return keel::cmd_describe(markdown);
    if (*smoke) return keel::cmd_smoke(config_path, overrides);
    if (*sample) return keel::cmd_sample(sample_path, prompt, sample_options);
    if (*prepare) return keel::cmd_prepare(config_path, overrides, prepare_options);
    if (*train) return keel::cmd_train(config_path, overrides, resume, stop_after_step);
    if (*launch) return keel::cmd_launch(launch_options);
    if (*sweep) {
      for (int i = 0; i < argc; ++i) sweep_options.command_line += (i ? " " : "") + std::string(i ? argv[i] : "keel");
      return keel::cmd_sweep(sweep_path, sweep_options);
    }
    if (*report) {
      report_options.plots = !no_plots;
      return keel::cmd_report(report_dir, report_options);
    }
  } catch (const keel::ConfigError& e) {  // bad input: exit 2 (DEVELOPERS.md, "Standards")
    return keel::report_config_error(e.what());
  } catch (const keel::DataError& e) {
    std::cerr << "keel: data error: " << e.what() << "\n";
    return 2;
  } catch (const keel::CheckpointError& e) {
    std::cerr << "keel: checkpoint error: " << e.what() << "\n";
    return 2;
  } catch (const keel::RunDirError& e) {
    std::cerr << "keel: " << e.what() << "\n";
    return 2;
  } catch (const keel::DistError& e) {  // a distributed setup that cannot work
    std::cerr << "keel: distributed setup: " << e.what() << "\n";
    return 2;
  } catch (const keel::RemoteRankError& e) {  // another rank's setup failed: exit as it did
    std::cerr << "keel: " << e.what() << "\n";
    return e.exit_code;
  } catch (const std::exception& e) {
    std::cerr << "keel: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
