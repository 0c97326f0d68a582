// keel: pretrain small language models and study why their training goes unstable.
#include <CLI/CLI.hpp>

#include <vector>

#include "cli/commands.h"
#include "util/error.h"
#include "util/stop_signal.h"

int main(int argc, char** argv) {
  keel::route_stop_signals();  // before any thread starts (util/stop_signal.h: why)
  CLI::App app{"keel: pretrain small decoder-only transformers and study their stability"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("keel ") + KEEL_VERSION);
  keel::set_invocation(argc, argv);
  // The one exit-code table (util/error.h, docs/reliability.md#exit-codes).
  app.footer(
      "Exit codes (every command):\n"
      "  0    done: finished what was asked (a sweep whose points diverged is done: divergence is a result)\n"
      "  1    internal error: a bug in keel (please report it with the message)\n"
      "  2    bad input: config, data, checkpoint, run directory or command line; the message names the key or file\n"
      "  3    training stopped by its own rule: a non-finite loss (train.nonfinite: halt),\n"
      "       monitor.stop_on_divergence, monitor.stop_on_logit_instability, monitor.max_rewinds reached\n"
      "  4    environment: disk full, quota, read-only or I/O error, permission, a data-parallel peer that failed,\n"
      "       no Python with matplotlib for report/compare plots\n"
      "  5    keel sweep: the sweep ran but some points failed (each point's code is in the sweep log)\n"
      "  128+N  stopped cleanly on signal N after saving (130 SIGINT, 143 SIGTERM); resume with the same command");
  // In the order `keel --help` lists them.
  const std::vector<keel::Command> commands = {
      keel::add_validate_command(app), keel::add_config_command(app),    keel::add_smoke_command(app),
      keel::add_train_command(app),    keel::add_launch_command(app),    keel::add_prepare_command(app),
      keel::add_tokenize_command(app), keel::add_sample_command(app), keel::add_eval_command(app),   keel::add_average_command(app),   keel::add_sweep_command(app),     keel::add_report_command(app),
      keel::add_compare_command(app),  keel::add_replay_command(app),    keel::add_export_hf_command(app), keel::add_import_hf_command(app),
      keel::add_bench_command(app),    keel::add_params_command(app),    keel::add_plan_command(app),
      keel::add_coordcheck_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help or the usage error
    return rc == 0 ? keel::exit_code::ok : keel::exit_code::bad_input;
  }
  try {
    for (const auto& run : commands)
      if (const int rc = run(); rc >= 0) return rc;
  } catch (const std::exception& e) {  // the one place errors become exit codes (util/error.h)
    return keel::report_error(e);
  }
  return keel::exit_code::ok;
}
