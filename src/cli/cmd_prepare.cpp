// `keel prepare CONFIG [--set k=v ...] [--force] [--verify]`: builds data.dir
// from data.sources (src/data/prepare.h). Exit 0 when built, or already
// prepared with the same settings; bad config or data raise keel errors.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "data/manifest.h"
#include "data/prepare.h"

namespace keel {

namespace {

struct PrepareArgs {
  ConfigArgs config;
  bool force = false;   // rebuild data.dir even if it exists
  bool verify = false;  // only check an existing data.dir (every shard's checksum and ids)
  bool quiet = false;   // no progress lines
};

int run_prepare(const PrepareArgs& a) {
  Config config = load_config(a.config.path, a.config.overrides);
  if (a.verify) {
    verify_prepared(config.data.dir);
    std::cout << prepare_summary(read_data_manifest(config.data.dir), config.data.dir)
              << "verified   every shard: size, checksum and token ids\n";
    return 0;
  }
  PrepareOptions options;
  options.force = a.force;
  options.quiet = a.quiet;
  PrepareResult r = prepare_data(config, options);
  if (!r.built)
    std::cout << config.data.dir << " is already prepared with these sources and settings; nothing to do "
              << "(--force rebuilds it)\n";
  std::cout << prepare_summary(r.manifest, config.data.dir);
  return 0;
}

}  // namespace

Command add_prepare_command(CLI::App& app) {
  auto args = std::make_shared<PrepareArgs>();
  auto* cmd = app.add_subcommand("prepare", "train the tokenizer and write token shards for data.dir");
  add_config_args(cmd, args->config);
  cmd->add_flag("--force", args->force, "rebuild data.dir even if it exists");
  cmd->add_flag("--verify", args->verify, "only check an existing data.dir (checksums, token ids)");
  cmd->add_flag("--quiet", args->quiet, "no progress lines");
  return [cmd, args]() -> int { return *cmd ? run_prepare(*args) : -1; };
}

}  // namespace keel
