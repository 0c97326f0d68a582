// `keel params CONFIG [--json]`: every parameter with its shape, the base
// model's shape, its µP role, init std, LR and weight-decay multipliers
// (model/parametrization.h), and the forward multipliers. What the settings
// table summarises, one row per tensor; the mup parity test reads the JSON.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "config/config.h"
#include "model/parametrization.h"
#include "util/log.h"

namespace keel {

namespace {

std::string dims(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int print_params(const Config& config, bool json) {
  const auto params = param_scalings(config.model, config.train);
  const ForwardScaling f = forward_scaling(config.model);
  if (json) {
    nlohmann::json out;
    out["parametrization"] = name_of(config.model.parametrization);
    out["output_mult"] = f.output_mult;
    out["residual_mult"] = f.residual_mult;
    out["adam_eps_mult"] = f.adam_eps_mult;
    out["attn_scale"] = f.attn_scale ? nlohmann::json(*f.attn_scale) : nlohmann::json(nullptr);
    out["params"] = nlohmann::json::array();
    for (const auto& p : params)
      out["params"].push_back({{"name", p.name}, {"shape", p.shape}, {"base_shape", p.base_shape},
                               {"role", width_role_name(p.role)}, {"muon", p.muon}, {"init_std", p.init_std},
                               {"lr_mult", p.lr_mult}, {"wd_mult", p.wd_mult}});
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  for (const auto& line : describe_parametrization(config.model, params)) std::cout << "# " << line << "\n";
  std::cout << strf("%-32s %-14s %-14s %-12s %-9s %-8s %-8s\n", "parameter", "shape", "base shape", "role",
                    "init std", "LR x", "decay x");
  for (const auto& p : params)
    std::cout << strf("%-32s %-14s %-14s %-12s %-9.4g %-8.4g %-8.4g\n", p.name.c_str(), dims(p.shape).c_str(),
                      dims(p.base_shape).c_str(), (width_role_name(p.role) + (p.muon ? "*" : "")).c_str(),
                      p.init_std, p.lr_mult, p.wd_mult);
  return 0;
}

}  // namespace

Command add_params_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("params", "every parameter's shape, base shape, init std and LR/decay multipliers "
                                           "under model.parametrization (muP, CompleteP)");
  add_config_args(cmd, *args);
  cmd->add_flag("--json", *json, "as JSON");
  return [cmd, args, json]() -> int {
    if (!*cmd) return -1;
    return print_params(load_config(args->path, args->overrides), *json);
  };
}

}  // namespace keel
