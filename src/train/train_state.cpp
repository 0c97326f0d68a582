#include "train/train_state.h"

#include <fstream>
#include <algorithm>
#include <set>

#ifdef KEEL_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#endif

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/safetensors.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

namespace keel {

namespace {

TensorMap model_tensors(Transformer& model) {
  TensorMap out;
  for (auto& p : model->named_parameters(true)) out.emplace_back(p.key(), p.value().detach());
  for (auto& b : model->named_buffers(true)) out.emplace_back(b.key(), b.value().detach());
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw CheckpointError(path + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void copy_into(TensorMap loaded, const TensorMap& targets, const std::string& file) {
  std::map<std::string, torch::Tensor> by_name(loaded.begin(), loaded.end());
  torch::NoGradGuard no_grad;
  for (const auto& [name, dst] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw CheckpointError(file + ": no tensor '" + name + "' (different architecture?)");
    if (it->second.sizes() != dst.sizes())
      throw CheckpointError(file + ": tensor '" + name + "' has shape " + c10::str(it->second.sizes()) +
                            ", the model expects " + c10::str(dst.sizes()));
    const_cast<torch::Tensor&>(dst).copy_(it->second);
  }
}

// Keys whose change on resume does not change what the run computes.
bool safe_to_change(const std::string& key) {
  static const std::set<std::string> safe = {
      "train.max_steps",       "train.log_every",       "train.eval_every", "train.eval_batches",
      "checkpoint.every",      "checkpoint.keep_last",  "checkpoint.keep_every", "checkpoint.at_end",
      "monitor.every",         "monitor.sequences",     "monitor.layer_grad_norms", "monitor.param_stats", "monitor.stop_on_divergence",
      "data.prefetch",         "run.overwrite",         "dist.timeout_s",        "dist.bucket_mb",        "dist.overlap",
      "dist.backend",          "run.name",
      "run.out_dir",           "run.tensorboard",
      // Thread count and attention kernel change rounding only (a sweep's --parallel may change
      // between sessions; a resumed run may land on another GPU).
      "train.threads", "train.attention_backend",
      // Only read by a fresh start; a resumed run has its own weights.
      "train.init_from",
      // The same numbers bit for bit: sharded optimizer state, recomputed activations.
      "dist.zero", "train.activation_checkpointing", "train.checkpoint_every_n",
      // What is evaluated, not what is trained (the weight EMA only watches the weights).
      "train.ema_decay",
      "eval.tasks", "eval.every", "eval.limit", "eval.batch_size", "eval.builtin_examples", "eval.sets"};
  return safe.count(key) > 0;
}

}  // namespace

TensorMap local_rng_state() {
  TensorMap rng = {{"cpu", at::detail::getDefaultCPUGenerator().get_state()}};
#ifdef KEEL_WITH_CUDA
  for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i)
    rng.emplace_back("cuda" + std::to_string(i), at::cuda::detail::getDefaultCUDAGenerator(i).get_state());
#endif
  return rng;
}

std::string save_training_checkpoint(const std::string& run_dir, const Config& config, Transformer& model,
                                     const Optimizer* optimizer, const TrainState& state,
                                     const std::string& tokenizer_path) {
  TensorMap weights = model_tensors(model);
  for (const auto& [name, t] : weights)
    if (t.is_floating_point() && !torch::isfinite(t).all().item<bool>())
      throw std::runtime_error("refusing to save a checkpoint at step " + std::to_string(state.step) +
                               ": weight '" + name + "' is not finite");
  nlohmann::json meta = {{"format", "keel-checkpoint"},
                         {"version", 1},
                         {"step", state.step},
                         {"tokens", state.tokens},
                         {"keel_version", KEEL_VERSION},
                         {"libtorch_version", TORCH_VERSION},
                         {"config", config_to_yaml(config)},
                         {"extra", state.extra}};
  std::vector<CheckpointFile> files;
  files.push_back({"model.safetensors", [&](const std::string& p) {
                     write_safetensors(p, weights, {{"format", "keel"}, {"step", std::to_string(state.step)}});
                   }});
  if (optimizer) {
    files.push_back({"optimizer.safetensors", [&](const std::string& p) { write_safetensors(p, optimizer->state()); }});
  }
  if (!state.ema.empty())
    files.push_back({"ema.safetensors", [&](const std::string& p) { write_safetensors(p, state.ema); }});
  files.push_back({"rng.safetensors", [&](const std::string& p) {
                     write_safetensors(p, state.rng.empty() ? local_rng_state() : state.rng);
                   }});
  // std::filesystem is avoided: libtorch.so exports its own copies of its
  // functions, which our calls bind to (see util/fs.h).
  if (!tokenizer_path.empty() && path_exists(tokenizer_path)) {
    // Under its own name: tokenizer.model (SentencePiece) or tokenizer.json.
    const std::string name = tokenizer_path.substr(tokenizer_path.rfind('/') + 1);
    files.push_back({name, [&](const std::string& p) {
                       write_file_durably(p, read_tokenizer_file(tokenizer_path));
                     }});
  }
  // Checked and fsynced like every other file (an unchecked stream once left
  // an empty state.json that the manifest then vouched for).
  files.push_back({"state.json", [&](const std::string& p) { write_file_durably(p, meta.dump(2) + "\n"); }});
  CheckpointStore store(run_dir);
  return store.save(state.step, files);
}

std::string checkpoint_tokenizer(const std::string& dir) {
  for (const char* name : {"tokenizer.model", "tokenizer.json"})
    if (path_exists(dir + "/" + name)) return dir + "/" + name;
  return "";
}

namespace {
TrainState load_unchecked(const std::string& dir, Transformer& model, Optimizer* optimizer, std::string* saved_config_yaml,
                          int rng_rank) {
  CheckpointStore::verify(dir);
  const std::string state_path = dir + "/state.json";
  nlohmann::json meta;
  try {
    meta = parse_json_bounded(read_text(state_path), state_path);
  } catch (const JsonError& e) {
    throw CheckpointError(e.what());
  }
  if (meta.value("format", "") != "keel-checkpoint")
    throw CheckpointError(state_path + ": not a keel checkpoint (format field)");
  copy_into(read_safetensors(dir + "/model.safetensors"), model_tensors(model), dir + "/model.safetensors");
  if (optimizer) {
    const std::string opt_path = dir + "/optimizer.safetensors";
    if (!path_exists(opt_path)) throw CheckpointError(opt_path + ": missing (weights-only checkpoint)");
    auto state = read_safetensors(opt_path);
    std::vector<std::pair<std::string, torch::Tensor>> moved;
    for (auto& [name, t] : state) moved.emplace_back(name, t);
    optimizer->load_state(moved);
    const std::string prefix = rng_rank == 0 ? "" : "rank" + std::to_string(rng_rank) + ".";
    for (auto& [full_name, t] : read_safetensors(dir + "/rng.safetensors")) {
      if (full_name.rfind(prefix, 0) != 0 || (prefix.empty() && full_name.rfind("rank", 0) == 0)) continue;
      const std::string name = full_name.substr(prefix.size());
      if (name == "cpu") {
        at::Generator gen = at::detail::getDefaultCPUGenerator();  // a handle to the global generator
        gen.set_state(t);
      }
#ifdef KEEL_WITH_CUDA
      else if (name.rfind("cuda", 0) == 0 && std::stoll(name.substr(4)) < torch::cuda::device_count())
      {
        at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(std::stoll(name.substr(4)));
        gen.set_state(t);
      }
#endif
    }
  }
  if (saved_config_yaml) *saved_config_yaml = meta.value("config", "");
  TrainState s;
  s.step = json_int<int64_t>(meta.at("step"));
  s.tokens = json_int<int64_t>(meta.at("tokens"));
  s.extra = meta.value("extra", nlohmann::json::object());
  return s;
}
}  // namespace

// A checkpoint is a file keel reads like any other: a field of the wrong type
// in state.json or a generator state LibTorch refuses is a CheckpointError
// naming the directory (exit 2), not an internal error.
TrainState load_training_checkpoint(const std::string& dir, Transformer& model, Optimizer* optimizer,
                                    std::string* saved_config_yaml, int rng_rank) {
  try {
    return load_unchecked(dir, model, optimizer, saved_config_yaml, rng_rank);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(dir + "/state.json: a field is missing or of the wrong type: " +
                          std::string(e.what()).substr(0, 300));
  } catch (const c10::Error& e) {
    throw CheckpointError(dir + ": LibTorch refused its contents: " +
                          std::string(e.what_without_backtrace()).substr(0, 300));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> load_checkpoint_ema(const std::string& dir) {
  const std::string path = dir + "/ema.safetensors";
  if (!path_exists(path)) return {};
  TensorMap loaded = read_safetensors(path);
  return {loaded.begin(), loaded.end()};
}

void load_checkpoint_weights(const std::string& dir, Transformer& model, const std::string& which,
                             const std::string& flag) {
  check_weights_choice(which, flag);
  load_training_checkpoint(dir, model, nullptr, nullptr);
  if (which == "live") return;
  const auto ema = load_checkpoint_ema(dir);
  if (ema.empty())
    throw CheckpointError(dir + "/ema.safetensors: missing: the run trained without train.ema_decay, so this "
                                "checkpoint has no weight average (use " + flag + " live)");
  TensorMap params;
  for (auto& p : model->named_parameters(true)) params.emplace_back(p.key(), p.value().detach());
  copy_into(TensorMap(ema.begin(), ema.end()), params, dir + "/ema.safetensors");
}

Config checkpoint_config(const std::string& dir) {
  nlohmann::json meta;
  try {
    meta = parse_json_bounded(read_text(dir + "/state.json"), dir + "/state.json");
  } catch (const JsonError& e) {
    throw CheckpointError(e.what());
  }
  if (meta.contains("config") && !meta["config"].is_string())
    throw CheckpointError(dir + "/state.json: \"config\" is not a string");
  return config_from_yaml_text(meta.value("config", ""));
}

ConfigDiff diff_for_resume(const Config& saved, const Config& current, const std::vector<std::string>& also_allowed) {
  Config a = saved, b = current;
  Schema sa = make_schema(a), sb = make_schema(b);
  ConfigDiff diff;
  for (size_t i = 0; i < sa.keys().size(); ++i) {
    const auto& key = sa.keys()[i];
    std::string va = sa.value_string(key), vb = sb.value_string(sb.keys()[i]);
    if (va == vb) continue;
    std::string line = key.path + ": " + va + " -> " + vb;
    const bool asked = std::find(also_allowed.begin(), also_allowed.end(), key.path) != also_allowed.end();
    (safe_to_change(key.path) || asked ? diff.allowed : diff.refused).push_back(line);
  }
  return diff;
}

}  // namespace keel
