// `keel prepare CONFIG [--set k=v ...] [--force] [--verify]`: builds data.dir
// from data.sources (src/data/prepare.h). Exit 0 when built, or already
// prepared with the same settings; bad config or data raise keel errors; a
// signal stops it cleanly (128 + the signal).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "data/manifest.h"
#include "data/prepare.h"
#include "util/stop_signal.h"

namespace keel {

namespace {

struct PrepareArgs {
  ConfigArgs config;
  bool force = false;   // rebuild data.dir even if it exists
  bool verify = false;  // only check an existing data.dir (every shard's checksum and ids)
  bool quiet = false;   // no progress lines
};

// With weighted sources: each entry's share of the train tokens beside the
// share of sequences its weight asks for (the loader up- or downsamples).
std::string mixture_summary(const Config& config, const DataManifest& m) {
  const auto mixture = data_mixture(config.data);
  if (mixture.empty()) return "";
  std::vector<int64_t> tokens(mixture.size(), 0);
  for (const auto& s : m.sources)
    if (s.entry >= 0 && s.entry < static_cast<int64_t>(tokens.size())) tokens[s.entry] += s.train_tokens;
  double weights = 0;
  for (const auto& [path, w] : mixture) weights += w;
  std::string out;
  char line[512];
  for (size_t i = 0; i < mixture.size(); ++i) {
    std::snprintf(line, sizeof line, "%s data.sources[%zu] %s: %lld train tokens (%.1f%%), weight %g (%.1f%% of sequences)\n",
                  i == 0 ? "mixture   " : "          ", i, mixture[i].first.c_str(), static_cast<long long>(tokens[i]),
                  m.train.tokens > 0 ? 100.0 * tokens[i] / m.train.tokens : 0.0, mixture[i].second,
                  100 * mixture[i].second / weights);
    out += line;
  }
  return out;
}

int run_prepare(const PrepareArgs& a) {
  Config config = load_config(a.config.path, a.config.overrides);
  if (a.verify) {
    verify_prepared(config.data.dir);
    std::cout << prepare_summary(read_data_manifest(config.data.dir), config.data.dir)
              << "verified   every shard: size, checksum and token ids\n";
    return 0;
  }
  // SIGINT/SIGTERM stop the work at the next chunk and remove what was
  // staged (exit 128 + the signal); a second one ends keel at once (training
  // the tokenizer does not poll), leaving a staging directory the next
  // prepare removes. Never a half-made data.dir.
  install_stop_handlers(/*second_signal_kills=*/true);
  PrepareOptions options;
  options.force = a.force;
  options.quiet = a.quiet;
  PrepareResult r = prepare_data(config, options);
  if (!r.built)
    std::cout << config.data.dir << " is already prepared with these sources and settings; nothing to do "
              << "(--force rebuilds it)\n";
  std::cout << prepare_summary(r.manifest, config.data.dir) << mixture_summary(config, r.manifest);
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
