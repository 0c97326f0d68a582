// `keel export-hf CHECKPOINT OUT_DIR` and `keel import-hf HF_DIR [OUT_DIR]`:
// Hugging Face interop (src/interop/). Both subcommands are declared here so
// main.cpp needs one line to register them and one to dispatch.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "checkpoint/weights_choice.h"
#include "cli/commands.h"
#include "config/config.h"
#include "interop/hf_export.h"
#include "util/error.h"
#include "util/fs.h"

namespace keel {

namespace {

struct HfCliArgs {
  std::string checkpoint, hf_dir, out_dir, dtype = "float32", weights = "live";
  int64_t max_seq_len = 0;
  bool force = false;
};

int run_export(const HfCliArgs& a) {
  check_weights_choice(a.weights);
  HfExportOptions o;
  o.dtype = a.dtype;
  o.force = a.force;
  o.weights = a.weights;
  HfExportResult r;
  try {
    r = export_hf(a.checkpoint, a.out_dir, o);
  } catch (const ConfigError& e) {
    throw InteropError(a.checkpoint + ": no Hugging Face class represents this model; the keys that prevent it:\n" +
                       e.what());
  }
  const auto& info = hf_family_info(r.family);
  std::cout << "exported " << r.checkpoint_dir << " as " << info.display << " (" << info.architecture << ", "
            << r.tensors << " tensors, " << a.dtype << ") to " << a.out_dir << ":\n";
  for (const auto& f : r.files) std::cout << "  " << f << "\n";
  std::cout << "load it with transformers.AutoModelForCausalLM.from_pretrained(\"" << a.out_dir
            << "\") and AutoTokenizer.from_pretrained(\"" << a.out_dir << "\")\n";
  return 0;
}

int run_import(const HfCliArgs& a) {
  HfImportOptions o;
  o.max_seq_len = a.max_seq_len;
  o.force = a.force;
  const std::string out = a.out_dir.empty() ? "runs/" + base_name(a.hf_dir) : a.out_dir;
  HfImportResult r;
  try {
    r = import_hf(a.hf_dir, out, o);
  } catch (const ConfigError& e) {
    throw InteropError(a.hf_dir + ": keel cannot represent this model:\n" + e.what());
  }
  std::cout << "imported " << a.hf_dir << " (" << hf_family_info(r.family).display << ") to " << out << ":\n"
            << "  checkpoint " << r.checkpoint_dir << "\n"
            << "  config     " << r.config_path << " (train.init_from: " << out << ")\n";
  for (const auto& n : r.notes) std::cout << "  note: " << n << "\n";
  std::cout << "continue pretraining: keel train " << r.config_path << "\n"
            << "sample:               keel sample " << out << " --prompt \"...\"\n";
  return 0;
}

}  // namespace

Command add_export_hf_command(CLI::App& app) {
  auto args = std::make_shared<HfCliArgs>();
  auto* cmd = app.add_subcommand(
      "export-hf", "write a checkpoint as a Hugging Face model directory (Llama, Qwen3, OLMo 2, Gemma 2/3 layouts)");
  cmd->add_option("checkpoint", args->checkpoint, "run directory (its newest valid checkpoint) or checkpoint directory")
      ->required();
  cmd->add_option("out_dir", args->out_dir, "directory to write (created; must be empty unless --force)")->required();
  cmd->add_option("--dtype", args->dtype, "dtype of the exported weights")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  cmd->add_flag("--force", args->force, "write into a non-empty OUT_DIR, replacing files of the same name");
  cmd->add_option("--weights", args->weights, "live (the trained weights) or ema (train.ema_decay's average)")
      ->capture_default_str();
  return [cmd, args]() -> int { return *cmd ? run_export(*args) : -1; };
}

Command add_import_hf_command(CLI::App& app) {
  auto args = std::make_shared<HfCliArgs>();
  auto* cmd = app.add_subcommand(
      "import-hf", "turn a Hugging Face model directory (a mapped layout) into a keel checkpoint + config to train from");
  cmd->add_option("hf_dir", args->hf_dir, "directory with config.json and model.safetensors (+ tokenizer.model)")
      ->required();
  cmd->add_option("out_dir", args->out_dir, "keel run directory to write; default runs/<name of HF_DIR>");
  cmd->add_option("--max-seq-len", args->max_seq_len,
                  "model.max_seq_len; 0 = max_position_embeddings, capped at 8192 and at any sliding window")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--force", args->force, "write into a non-empty OUT_DIR");
  return [cmd, args]() -> int { return *cmd ? run_import(*args) : -1; };
}

}  // namespace keel
