// `keel smoke CONFIG`: build the model from a config, print its size, and run
// one forward and backward pass on random tokens. A check that a config is
// not only valid but runnable.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "config/config.h"
#include "model/init.h"
#include "model/model_size.h"

namespace keel {

namespace {

int run_smoke(const Config& config) {
  const auto& m = config.model;
  const int64_t T = config.seq_len(), B = 2;
  ModelSize size = model_size(m, T);
  Transformer model = build_model(m, static_cast<uint64_t>(config.run.seed));
  torch::manual_seed(config.run.seed);
  auto tokens = torch::randint(0, m.vocab_size, {B, T + 1}, torch::kInt64);
  auto logits = model->forward(tokens.narrow(1, 0, T));
  auto loss = language_model_loss(logits, tokens.narrow(1, 1, T), config.train.z_loss);
  loss.total.backward();
  double grad_sq = 0;
  for (const auto& p : model->parameters())
    if (p.grad().defined()) grad_sq += p.grad().pow(2).sum().item<double>();
  std::cout << "parameters " << size.total << " (matmul " << size.matmul << ")\n"
            << "FLOPs/token " << size.flops_per_token << "  [" << flops_convention() << "]\n"
            << "forward+backward on " << B << "x" << T << " random tokens: loss " << loss.ce.item<double>()
            << " (uniform would be " << std::log(static_cast<double>(m.vocab_size)) << "), grad norm "
            << std::sqrt(grad_sq) << "\n";
  return std::isfinite(loss.ce.item<double>()) ? exit_code::ok : exit_code::nonfinite;
}

}  // namespace

Command add_smoke_command(CLI::App& app) {
  auto args = std::make_shared<ConfigArgs>();
  auto* cmd = app.add_subcommand("smoke", "build the model and run one forward/backward pass");
  add_config_args(cmd, *args);
  return [cmd, args]() -> int { return *cmd ? run_smoke(load_config(args->path, args->overrides)) : -1; };
}

}  // namespace keel
