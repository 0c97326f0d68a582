// keel: pretrain small language models and study why their training goes unstable.
#include <CLI/CLI.hpp>

#include <vector>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"keel: pretrain small decoder-only transformers and study their stability"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("keel ") + KEEL_VERSION);
  keel::set_invocation(argc, argv);
  // In the order `keel --help` lists them.
  const std::vector<keel::Command> commands = {
      keel::add_validate_command(app), keel::add_config_command(app),    keel::add_smoke_command(app),
      keel::add_train_command(app),    keel::add_launch_command(app),    keel::add_prepare_command(app),
      keel::add_tokenize_command(app), keel::add_sample_command(app),   keel::add_sweep_command(app),     keel::add_report_command(app),
      keel::add_compare_command(app),  keel::add_export_hf_command(app), keel::add_import_hf_command(app),
      keel::add_bench_command(app)};
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
