// `keel validate CONFIG` and `keel config --describe`.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"

namespace keel {

namespace {
std::string& invocation_text() {
  static std::string text;
  return text;
}
}  // namespace

void set_invocation(int argc, char** argv) {
  std::string& text = invocation_text();
  text = "keel";
  for (int i = 1; i < argc; ++i) text += " " + std::string(argv[i]);
}

const std::string& invocation() { return invocation_text(); }

void add_config_args(CLI::App* cmd, ConfigArgs& args) {
  cmd->add_option("config", args.path, "run configuration (YAML)")->required();
  cmd->add_option("--set", args.overrides, "override a key: --set train.lr=1e-3 (repeatable)");
}

Command add_validate_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  auto* cmd = app.add_subcommand("validate", "print the fully resolved config, or every error in it");
  add_config_args(cmd, *args);
  return [cmd, args]() -> int {
    if (!*cmd) return -1;
    Config config = load_config(args->path, args->overrides);
    std::cout << "# resolved from " << args->path << "\n" << config_to_yaml(config);
    return 0;
  };
}

Command add_config_command(CLI::App& app) {
  struct Flags {
    bool describe = false, markdown = false;
  };
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("config", "describe every config key");
  cmd->add_flag("--describe", flags->describe, "print every key with type, default and description");
  cmd->add_flag("--markdown", flags->markdown, "as a Markdown table (docs/configuration.md is made from it)");
  return [cmd, flags]() -> int {
    if (!*cmd) return -1;
    std::cout << describe_config(flags->markdown);
    return 0;
  };
}

}  // namespace keel
