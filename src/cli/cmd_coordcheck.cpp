// `keel coordcheck CONFIG --widths 64,128,256,512 [--depths 2,4,8] --steps 5`:
// the coordinate check of train/coord_check.h. Writes OUT/coordcheck.json,
// OUT/coordcheck.csv and OUT/plots/coordcheck.png (activation RMS against
// width or depth, one line per step), and prints the log-log slope of the
// logits' and the last residual stream's RMS at the last step.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "analysis/sweep_report.h"
#include "train/coord_check.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

namespace keel {

namespace {

struct CoordArgs {
  ConfigArgs config;
  std::vector<int64_t> widths, depths;
  int64_t steps = 5;
  std::string out;
  bool random_tokens = false, force = false, plots = true;
};

// Batches of the config's training data, or seeded random tokens.
std::function<Batch(int64_t)> batches(const Config& c, bool random_tokens) {
  const int64_t B = c.train.batch_size, T = c.seq_len();
  if (random_tokens) {
    const int64_t V = c.model.vocab_size, seed = c.run.seed;
    // One seeded batch for every step: random tokens share no statistics
    // between batches, so only a repeated batch lets an update line up with
    // the inputs it is read on (the alignment µP's scaling is about).
    return [B, T, V, seed](int64_t) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
      auto tokens = torch::randint(V, {B, T + 1}, gen, torch::kLong);
      return Batch{tokens.narrow(1, 0, T).contiguous(), tokens.narrow(1, 1, T).contiguous()};
    };
  }
  if (!path_exists(c.data.dir + "/manifest.json"))
    throw DataError(c.data.dir + "/manifest.json: no prepared data; run `keel prepare` with this config first, "
                    "or pass --random-tokens");
  auto loader = std::make_shared<BatchLoader>(c.data.dir, "train", T, B, 0, 1, static_cast<uint64_t>(c.run.seed), 0,
                                              /*verify=*/false);
  if (loader->vocab_size() > c.model.vocab_size)
    throw DataError(c.data.dir + ": tokenizer vocabulary " + std::to_string(loader->vocab_size()) +
                    " exceeds model.vocab_size " + std::to_string(c.model.vocab_size));
  return [loader](int64_t step) { return loader->get(step); };
}

std::string layer_csv(const std::vector<CoordRecord>& records) {
  std::string csv = "width,depth,step,layer,rms\n";
  for (const auto& r : records)
    csv += strf("%lld,%lld,%lld,%s,%.9g\n", static_cast<long long>(r.width), static_cast<long long>(r.depth),
                static_cast<long long>(r.step), r.layer.c_str(), r.rms);
  return csv;
}

int run_coordcheck(const CoordArgs& a) {
  const Config config = load_config(a.config.path, a.config.overrides);
  if (a.steps < 1 || a.steps > 1000) throw Error("--steps " + std::to_string(a.steps) + ": expected 1..1000", "coordcheck");
  const std::string out = a.out.empty() ? config.run.out_dir + "/" + config.run.name + "-coordcheck" : a.out;
  if (path_exists(out) && !(is_directory(out) && list_directory(out).empty()) && !a.force)
    throw RunDirError(out + ": exists and is not empty; choose --out or pass --force to replace its coordcheck files");
  if (config.train.threads > 0) torch::set_num_threads(static_cast<int>(config.train.threads));
  CoordCheckOptions o;
  o.widths = a.widths;
  o.depths = a.depths;
  o.steps = a.steps;
  std::cout << "coordcheck: " << name_of(config.model.parametrization) << ", " << config.train.batch_size << " x "
            << config.seq_len() << " tokens per step, LR " << config.train.lr << " constant, " << a.steps
            << " steps, " << (a.random_tokens ? "random tokens" : "data " + config.data.dir) << "\n";
  const auto records =
      coord_check(config, o, batches(config, a.random_tokens), [](const std::string& line) { std::cout << line << "\n"; });

  ensure_directory(out);
  nlohmann::json j;
  j["parametrization"] = name_of(config.model.parametrization);
  j["config"] = a.config.path;
  j["overrides"] = a.config.overrides;
  j["steps"] = a.steps;
  j["lr"] = config.train.lr;
  j["data"] = a.random_tokens ? "random tokens" : config.data.dir;
  j["records"] = nlohmann::json::array();
  for (const auto& r : records)
    j["records"].push_back({{"width", r.width}, {"depth", r.depth}, {"step", r.step}, {"layer", r.layer}, {"rms", r.rms}});
  const bool by_depth = o.depths.size() > 1 && o.widths.size() <= 1;
  nlohmann::json slopes;
  for (const char* layer : {"logits", "residual", "embed"}) {
    const double s = coord_slope(records, layer, a.steps, by_depth);
    slopes[layer] = std::isfinite(s) ? nlohmann::json(s) : nlohmann::json(nullptr);
    if (std::isfinite(s))
      std::cout << strf("slope of log RMS(%s) against log %s at step %lld: %+.3f\n", layer,
                        by_depth ? "depth" : "width", static_cast<long long>(a.steps), s);
  }
  j["axis"] = by_depth ? "depth" : "width";
  j["slopes_at_last_step"] = slopes;
  write_file_atomic(out + "/coordcheck.json", j.dump(1) + "\n");
  write_file_atomic(out + "/coordcheck.csv", layer_csv(records));
  std::cout << "wrote " << out << "/coordcheck.json, coordcheck.csv\n";
  if (!a.plots) return 0;
  std::vector<std::string> drawn;
  std::string note;
  const int rc = draw_plots("scripts/plots/plot_coordcheck.py", {out + "/coordcheck.json", out + "/plots"}, out, "",
                            {"coordcheck"}, &drawn, &note);
  if (!drawn.empty()) std::cout << "wrote " << out << "/plots/coordcheck.png\n";
  return rc;
}

}  // namespace

Command add_coordcheck_command(CLI::App& app) {
  auto a = std::make_shared<CoordArgs>();
  auto* cmd = app.add_subcommand("coordcheck", "the muP coordinate check: activation RMS per layer over a few steps, "
                                               "across widths (and depths)");
  add_config_args(cmd, a->config);
  cmd->add_option("--widths", a->widths, "d_model values, comma-separated (default: the config's)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--depths", a->depths, "n_layers values, comma-separated (default: the config's)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  cmd->add_option("--steps", a->steps, "optimizer steps (activations read at steps 0..N)");
  cmd->add_option("--out", a->out, "output directory (default RUN.out_dir/RUN.name-coordcheck)");
  cmd->add_flag("--random-tokens", a->random_tokens, "one seeded batch of random tokens at every step, instead of the prepared data");
  cmd->add_flag("--force", a->force, "write into a non-empty output directory");
  cmd->add_flag("!--no-plots", a->plots, "skip the plot");
  return [cmd, a]() -> int {
    if (!*cmd) return -1;
    if (a->widths.size() > 64 || a->depths.size() > 64)
      throw Error("--widths/--depths: at most 64 values each", "coordcheck");
    return run_coordcheck(*a);
  };
}

}  // namespace keel
