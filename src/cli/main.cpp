// keel: pretrain small language models and study why their training goes unstable.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cmd_prepare.h"
#include "checkpoint/checkpoint_error.h"
#include "cli/commands.h"
#include "config/config.h"
#include "data/data_error.h"
#include "train/run_dir.h"
#include "model/generate.h"

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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (*validate) return keel::cmd_validate(config_path, overrides);
    if (*config_cmd) return keel::cmd_describe(markdown);
    if (*smoke) return keel::cmd_smoke(config_path, overrides);
    if (*sample) return keel::cmd_sample(sample_path, prompt, sample_options);
    if (*prepare) return keel::cmd_prepare(config_path, overrides, prepare_options);
    if (*train) return keel::cmd_train(config_path, overrides, resume, stop_after_step);
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
  } catch (const std::exception& e) {
    std::cerr << "keel: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
