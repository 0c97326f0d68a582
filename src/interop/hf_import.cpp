// Hugging Face model directory -> keel run directory (checkpoint + config.yaml).
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/safetensors.h"
#include "data/tokenizer.h"
#include "interop/hf_config.h"
#include "interop/hf_export.h"
#include "interop/hf_files.h"
#include "model/init.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/text.h"

namespace keel {

namespace {

nlohmann::json read_json(const std::string& path) {
  if (!path_exists(path)) throw InteropError(path + ": missing");
  try {
    return parse_json_bounded(read_small_file(path), path);
  } catch (const JsonError& e) {
    throw InteropError(e.what());
  }
}

// model.safetensors, or every shard named by model.safetensors.index.json.
std::map<std::string, torch::Tensor> read_hf_weights(const std::string& dir) {
  std::vector<std::string> files;
  if (path_exists(dir + "/model.safetensors")) {
    files.push_back(dir + "/model.safetensors");
  } else if (path_exists(dir + "/model.safetensors.index.json")) {
    const auto index = read_json(dir + "/model.safetensors.index.json");
    std::set<std::string> shards;
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      throw InteropError(dir + "/model.safetensors.index.json: no weight_map");
    for (const auto& [name, shard] : index["weight_map"].items()) {
      // A shard is a plain file name inside the model directory: never a path
      // that leads out of it ("../x.safetensors", "/etc/x", "a/../../x").
      if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>()))
        throw InteropError(dir + "/model.safetensors.index.json: weight_map[\"" + name.substr(0, 200) +
                           "\"] names " + json_excerpt(shard) +
                           ", which is not a plain file name in the model directory");
      shards.insert(shard.get<std::string>());
    }
    for (const auto& s : shards) files.push_back(dir + "/" + s);
  } else {
    throw InteropError(dir + ": no model.safetensors or model.safetensors.index.json (keel reads safetensors "
                             "weights only, not pytorch_model.bin)");
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& f : files)
    for (auto& [name, t] : read_safetensors(f)) {
      if (out.count(name)) throw InteropError(f + ": tensor '" + name + "' appears in two files");
      out.emplace(name, std::move(t));
    }
  return out;
}

// Copies the Hugging Face tensors into `model`, converting to fp32. Padded
// vocabulary rows are zero (their logits are masked to -inf anyway).
void copy_weights(std::map<std::string, torch::Tensor>& hf, Transformer& model, const ModelConfig& m,
                  HfFamily family, const std::string& where) {
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters(true);
  const double keel_offset = m.norm_unit_offset ? 1.0 : 0.0;
  const double hf_offset = hf_family_info(family).unit_offset_norms ? 1.0 : 0.0;
  std::vector<std::string> missing, wrong;
  std::set<std::string> used;
  for (const auto& n : hf_tensor_names(m, family)) {
    auto it = hf.find(n.hf);
    if (it == hf.end()) {
      missing.push_back(n.hf);
      continue;
    }
    used.insert(n.hf);
    torch::Tensor t = it->second.to(torch::kFloat32);
    if (t.sizes() != c10::IntArrayRef(n.hf_shape)) {
      wrong.push_back(n.hf + " has shape " + c10::str(t.sizes()) + ", config.json implies " +
                      c10::str(c10::IntArrayRef(n.hf_shape)));
      continue;
    }
    torch::Tensor* p = params.find(n.keel);
    if (!p) throw InteropError("internal: keel model has no parameter '" + n.keel + "'");
    if (n.role == TensorRole::vocab_rows) {
      p->zero_();
      p->narrow(0, 0, m.vocab_size).copy_(t);
    } else if (n.role == TensorRole::norm_gain) {
      p->copy_(t + (hf_offset - keel_offset));
    } else {
      p->copy_(t);
    }
  }
  std::vector<std::string> unknown;
  for (const auto& [name, t] : hf) {
    if (used.count(name) || is_ignorable_hf_tensor(name)) continue;
    if (name == "lm_head.weight" && m.tie_embeddings) continue;  // transformers ties it to the embedding
    unknown.push_back(name);
  }
  if (missing.empty() && wrong.empty() && unknown.empty()) return;
  std::string msg = where + ": the weights do not match config.json's " + hf_family_info(family).display + " layout:";
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    for (size_t i = 0; i < v.size() && i < 8; ++i) msg += std::string("\n  ") + what + v[i];
    if (v.size() > 8) msg += "\n  ... and " + std::to_string(v.size() - 8) + " more";
  };
  list("missing: ", missing);
  list("", wrong);
  list("not in the layout: ", unknown);
  throw InteropError(msg);
}

std::string absolute(const std::string& path) {
  std::string r = real_path(path);
  if (!r.empty() && r[0] == '/') return r;
  return current_dir() + "/" + path;
}

}  // namespace

HfImportResult import_hf(const std::string& hf_dir, const std::string& out_dir, const HfImportOptions& options) {
  HfImportResult result;
  if (!is_directory(hf_dir)) throw InteropError(hf_dir + ": not a directory");
  check_output_dir(out_dir, options.force);
  const auto hf_config = read_json(hf_dir + "/config.json");
  HfImportedConfig imported = model_config_from_hf(hf_config, options.max_seq_len);
  result.family = imported.family;
  result.notes = imported.notes;

  // The keel config: the imported model, defaults elsewhere, and the two keys
  // that make `keel train <out>/config.yaml` continue from these weights.
  Config config;
  config.model = imported.model;
  const std::string name = base_name(out_dir);
  config.run.name = name + "-continued";
  config.data.dir = "runs/data/" + name;
  config.train.init_from = absolute(out_dir);

  // SentencePiece's tokenizer.model first (keel's own exports carry both
  // files); else a byte-level BPE tokenizer.json (GPT-2, Llama 3, Qwen, OLMo 2).
  std::string tokenizer_path;
  std::string refused;
  for (const char* file : {"tokenizer.model", "tokenizer.json"}) {
    const std::string path = hf_dir + "/" + file;
    if (!tokenizer_path.empty() || !path_exists(path)) continue;
    std::optional<Tokenizer> tokenizer;
    try {
      tokenizer.emplace(path);  // validates it
    } catch (const DataError& e) {
      if (std::string(file) == "tokenizer.model") throw;
      refused = e.what();
      continue;
    }
    tokenizer_path = path;
    result.has_tokenizer = true;
    if (tokenizer->vocab_size() != config.model.vocab_size)
      result.notes.push_back(std::string(file) + " has " + std::to_string(tokenizer->vocab_size()) +
                             " pieces but vocab_size is " + std::to_string(config.model.vocab_size) +
                             ": keel trains only when they are equal (data.tokenizer)");
    if (tokenizer->eos_id() < 0) result.notes.push_back(std::string(file) + " has no EOS, which keel's data needs");
  }
  if (tokenizer_path.empty())
    result.notes.push_back("no tokenizer.model (SentencePiece) in " + hf_dir +
                           (refused.empty() ? std::string(" and no tokenizer.json")
                                            : ", and its tokenizer.json is not one keel reads (" + refused + ")") +
                           ": set data.tokenizer to a tokenizer with this model's ids before training");
  validate(config);

  auto weights = read_hf_weights(hf_dir);
  Transformer model(config.model);
  init_weights(model, config.model, 0);  // every tensor is overwritten or checked missing below
  copy_weights(weights, model, config.model, imported.family, hf_dir);

  prepare_output_dir(out_dir, options.force);
  // The checkpoint's copy of the tokenizer is the one data.tokenizer names, so
  // the directory is self-contained.
  const std::string step_dir = CheckpointStore(out_dir).step_dir(0);
  if (result.has_tokenizer)
    config.data.tokenizer = absolute(step_dir) + tokenizer_path.substr(tokenizer_path.rfind('/'));
  TrainState state;
  state.extra = {{"imported_from", absolute(hf_dir)},
                 {"hf_model_type", hf_family_info(imported.family).model_type}};
  result.checkpoint_dir = save_training_checkpoint(out_dir, config, model, nullptr, state, tokenizer_path);

  result.config_path = out_dir + "/config.yaml";
  const std::string header =
      "# Written by keel import-hf from " + absolute(hf_dir) + " (" + hf_family_info(imported.family).display +
      ").\n"
      "# The model section reproduces that model; train.init_from loads its weights into a fresh run and\n"
      "# data.tokenizer tokenizes data.sources with its tokenizer. Train or continue pretraining with\n"
      "#   keel train " + result.config_path + " [--set train.lr=... --set data.sources=...]\n"
      "# Everything else is keel's default: review train.* (a continued run usually wants a lower lr).\n";
  write_output_file(out_dir, "config.yaml",
                    [&](const std::string& p) { write_file_durably(p, header + config_to_yaml(config)); });
  fsync_dir(out_dir);
  return result;
}

}  // namespace keel
