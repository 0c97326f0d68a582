// `keel eval CHECKPOINT --task KIND:FILE ...`: the downstream tasks of
// eval.tasks on any checkpoint (a run's newest, an average of checkpoints,
// an imported Hugging Face model), scored exactly as during training, and
// the validation loss of its data.dir (and of eval.sets) on the windows
// training evaluates. Under `keel launch` or torchrun the examples are split
// over the ranks, with one rank's numbers.
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <memory>

#include "checkpoint/checkpoint_resolve.h"
#include "cli/commands.h"
#include "config/config.h"
#include "data/manifest.h"
#include "distributed/dist_env.h"
#include "eval/task_evaluator.h"
#include "train/device.h"
#include "train/evaluator.h"
#include "train/training_setup.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/hashing.h"
#include "util/log.h"
#include "util/fs.h"
#include "util/text.h"

namespace keel {

namespace {

struct EvalArgs {
  std::string path, data_dir, out, weights = "live";
  std::vector<std::string> tasks;
  int64_t limit = -1, batch_size = 0, builtin_examples = 0, val_batches = -1;
  bool force = false;
};

// "0.5280 ± 0.0316", or "-" where the task reports no such metric.
std::string with_stderr(const nlohmann::json& m, const std::string& key) {
  if (!m.contains(key) || !m[key].is_number()) return "-";
  const std::string se = m.contains(key + "_stderr") && m[key + "_stderr"].is_number()
                             ? strf(" ± %.4f", m[key + "_stderr"].get<double>())
                             : "";
  return strf("%.4f", m[key].get<double>()) + se;
}

int run_eval(const EvalArgs& a) {
  check_weights_choice(a.weights);
  const std::string dir = resolve_checkpoint_for_command(a.path);
  Config cfg = checkpoint_config(dir);
  if (!a.tasks.empty()) cfg.eval.tasks = a.tasks;
  if (!a.data_dir.empty()) cfg.data.dir = a.data_dir;
  if (a.limit >= 0) cfg.eval.limit = a.limit;
  if (a.batch_size > 0) cfg.eval.batch_size = a.batch_size;
  if (a.builtin_examples > 0) cfg.eval.builtin_examples = a.builtin_examples;
  if (a.val_batches >= 0) cfg.train.eval_batches = a.val_batches;
  // The validation split of data.dir, when it was prepared with this
  // checkpoint's tokenizer (an imported model's data.dir may not exist).
  const std::string tokenizer_path = checkpoint_tokenizer(dir);
  if (tokenizer_path.empty())
    throw CheckpointError(dir + " holds no tokenizer.model or tokenizer.json: keel eval needs the tokenizer");
  std::optional<DataManifest> val_data;
  std::string no_val;
  if (cfg.train.eval_batches == 0) {
    no_val = "--val-batches 0";
  } else if (!path_exists(cfg.data.dir + "/manifest.json")) {
    no_val = cfg.data.dir + " holds no prepared data";
  } else {
    DataManifest m = read_data_manifest(cfg.data.dir);
    if (m.tokenizer.sha256 != sha256_file(tokenizer_path)) no_val = cfg.data.dir + " was prepared with another tokenizer";
    else if (m.val.tokens <= cfg.model.max_seq_len) no_val = cfg.data.dir + " has no validation split";
    else val_data = m;
  }
  {
    ConfigErrors errors;
    if (cfg.eval.tasks.empty() && !val_data)
      errors.add("--task", "no tasks and no validation loss (" + no_val + "): give --task builtin or --task "
                           "KIND:FILE (the checkpoint's eval.tasks is empty)");
    check_eval(cfg, errors);
    if (!errors.empty()) throw ConfigError(errors);
  }
  if (!a.out.empty() && path_exists(a.out) && !a.force && !list_directory(a.out).empty())
    throw FileError(a.out + " exists and is not empty: choose another --out, or --force to write into it", 2);

  const DistEnv env = parse_dist_env(current_dist_environment());
  const ComputeSetup compute = setup_compute(cfg.train, env.local_rank, env.local_world_size);
  std::unique_ptr<Dist> dist = env.distributed()
                                   ? std::make_unique<Dist>(env, resolve_backend(cfg.dist.backend, compute.device.is_cuda()),
                                                            cfg.dist.timeout_s, compute.device, compute.device_key)
                                   : std::make_unique<Dist>();
  const Tokenizer tok(tokenizer_path);
  bool builtin = false;
  for (const auto& t : task_specs(cfg)) builtin = builtin || t.kind == "builtin";
  const DataManifest data = builtin ? read_data_manifest(cfg.data.dir) : DataManifest{};
  if (builtin && data.tokenizer.sha256 != sha256_file(tokenizer_path))
    throw ConfigError([&] {
      ConfigErrors e;
      e.add("--data", cfg.data.dir + " was prepared with another tokenizer than " + dir + "'s: the builtin task "
                      "would be made of other tokens");
      return e;
    }());

  Transformer model(cfg.model);
  load_checkpoint_weights(dir, model, a.weights);
  model->to(compute.device, compute.fp64 ? torch::kFloat64 : torch::kFloat32);
  // As in training (and its in-loop evaluation): an EOS starts a document.
  if (cfg.data.document_mask) model->set_documents({tok.eos_id(), cfg.data.resets_positions()});
  nlohmann::json validation;  // {"loss", "ppl", "batches", "tokens", "sets"}, as training records them
  if (val_data) {
    // The run's own validation geometry: the same windows its training evaluated.
    if (dist->rank() == 0) prepare_eval_sets(cfg, *val_data);  // a no-op for a run that trained with them
    dist->barrier("preparing eval.sets");
    Evaluator val(cfg, *val_data, batch_geometry(cfg, dist->world()), *dist, compute);
    const double loss = val.evaluate(model);
    validation = {{"data", cfg.data.dir}, {"loss", loss}, {"ppl", std::exp(loss)}, {"batches", cfg.train.eval_batches},
                  {"sets", val.evaluate_sets(model)}};
  }
  TaskEvaluator ev(load_eval_tasks(cfg, data, tok), tok, cfg.model.max_seq_len, cfg.eval.batch_size, dist.get(),
                   EvalDevice{compute.device, compute.bf16_autocast});
  const auto t0 = std::chrono::steady_clock::now();
  ev.evaluate(model);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (dist->rank() != 0) return 0;

  if (!validation.is_null()) {
    std::cout << strf("validation loss %.4f (ppl %.2f) on %lld batches of %s\n", validation["loss"].get<double>(),
                      validation["ppl"].get<double>(), static_cast<long long>(cfg.train.eval_batches),
                      cfg.data.dir.c_str());
    for (const auto& [name, m] : validation["sets"].items())
      std::cout << strf("held-out set %s: loss %.4f (ppl %.2f)\n", name.c_str(), m["loss"].get<double>(),
                        m["ppl"].get<double>());
  } else {
    std::cout << "no validation loss: " << no_val << "\n";
  }

  int64_t examples = 0;
  for (const auto& t : ev.tasks()) examples += static_cast<int64_t>(t.docs.size());
  const double per_s = seconds > 0 ? static_cast<double>(examples) / seconds : 0.0;
  std::cout << strf("%s: %s, %d rank(s), %lld examples in %.1f s (%.0f examples/s)\n", dir.c_str(),
                    compute.device.str().c_str(), dist->world(), static_cast<long long>(examples), seconds, per_s);
  if (!ev.tasks().empty())
    std::cout << strf("%-16s %9s  %-18s %-18s %s\n", "task", "examples", "acc", "acc_norm", "perplexity");
  for (const auto& [name, m] : ev.last().items())
    std::cout << strf("%-16s %9lld  %-18s %-18s %s\n", name.c_str(), static_cast<long long>(m["examples"].get<int64_t>()),
                      with_stderr(m, "acc").c_str(), with_stderr(m, "acc_norm").c_str(),
                      m.contains("perplexity") && m["perplexity"].is_number()
                          ? strf("%.3f", m["perplexity"].get<double>()).c_str()
                          : "-");
  if (!a.out.empty()) {
    ensure_directory(a.out);
    nlohmann::json results = {{"checkpoint", dir}, {"validation", validation}, {"tasks", ev.last()}, {"world_size", dist->world()},
                              {"seconds", seconds}, {"examples_per_s", per_s}};
    write_file_atomic(a.out + "/results.json", results.dump(2) + "\n");
    for (size_t t = 0; t < ev.tasks().size(); ++t)
      write_file_atomic(a.out + "/" + ev.tasks()[t].spec.name + ".scores.jsonl", ev.examples_jsonl(t));
    std::cout << "results in " << a.out << "/results.json, each example's log-likelihoods in "
              << a.out << "/<task>.scores.jsonl\n";
  }
  return 0;
}

}  // namespace

Command add_eval_command(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "score a checkpoint on downstream tasks as lm-evaluation-harness does "
                                         "(docs/evaluation.md)");
  cmd->add_option("checkpoint", a->path, "run directory (its newest checkpoint) or checkpoint directory")->required();
  cmd->add_option("--task", a->tasks,
                  "[name=]kind:file (kind: hellaswag, arc, piqa, winogrande, lambada, jsonl) or builtin; "
                  "repeatable; default: the checkpoint's eval.tasks");
  cmd->add_option("--limit", a->limit, "the first N examples of each task; 0 = all (default: eval.limit)");
  cmd->add_option("--batch-size", a->batch_size, "requests per forward (default: eval.batch_size)");
  cmd->add_option("--builtin-examples", a->builtin_examples, "examples of the builtin task (default: eval.builtin_examples)");
  cmd->add_option("--data", a->data_dir, "the prepared data whose validation split makes the builtin task "
                                         "(default: the checkpoint's data.dir)");
  cmd->add_option("--val-batches", a->val_batches, "validation batches of data.dir (0: no validation loss; default: "
                                                 "train.eval_batches, the windows training evaluated)");
  cmd->add_option("--out", a->out, "write results.json and each task's per-example log-likelihoods here");
  cmd->add_flag("--force", a->force, "write into a non-empty --out");
  cmd->add_option("--weights", a->weights, "live (the trained weights) or ema (train.ema_decay's average)")
      ->capture_default_str();
  return [cmd, a]() -> int { return *cmd ? run_eval(*a) : -1; };
}

}  // namespace keel
