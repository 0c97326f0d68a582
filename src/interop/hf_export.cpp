// keel checkpoint -> Hugging Face model directory.
#include "interop/hf_export.h"

#include <iostream>
#include <optional>

#include "checkpoint/checkpoint_resolve.h"
#include "checkpoint/safetensors.h"
#include "data/tokenizer.h"
#include "interop/hf_config.h"
#include "interop/hf_files.h"
#include "interop/hf_tokenizer.h"
#include "model/transformer.h"
#include "train/train_state.h"
#include "util/error.h"
#include "util/fs.h"

namespace keel {

namespace {

torch::Dtype export_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  throw InteropError("--dtype " + name + ": expected float32, bfloat16 or float16");
}

// The Hugging Face tensors of a loaded keel model.
TensorMap hf_tensors(Transformer& model, const ModelConfig& m, HfFamily family, torch::Dtype dtype) {
  torch::NoGradGuard no_grad;
  auto params = model->named_parameters(true);
  // Gains: keel stores w with gain w (or 1 + w under model.norm_unit_offset);
  // Gemma's classes compute 1 + w, the others w.
  const double keel_offset = m.norm_unit_offset ? 1.0 : 0.0;
  const double hf_offset = hf_family_info(family).unit_offset_norms ? 1.0 : 0.0;
  const auto folds = hf_fold_factors(m);  // µP/CompleteP multipliers, into the tensors
  auto fold_of = [&](const std::string& name) {
    for (const auto& [keel_name, factor] : folds)
      if (keel_name == name) return factor;
    return 1.0;
  };
  TensorMap out;
  for (const auto& n : hf_tensor_names(m, family)) {
    torch::Tensor t;
    if (n.role == TensorRole::unit_gain) {
      t = torch::full(n.hf_shape, 1.0 - hf_offset, torch::kFloat32);
    } else {
      const torch::Tensor* p = params.find(n.keel);
      if (!p) throw CheckpointError("model has no parameter '" + n.keel + "' (needed for " + n.hf + ")");
      t = p->detach().to(torch::kCPU);
      if (n.role == TensorRole::vocab_rows) t = t.narrow(0, 0, m.vocab_size);
      const double fold = fold_of(n.keel);
      if (n.role == TensorRole::norm_gain) {
        if (fold != 1.0) t = (t.to(torch::kFloat64) + keel_offset) * fold - keel_offset;  // the effective gain x fold
        if (keel_offset != hf_offset) t = t + (keel_offset - hf_offset);
      } else if (fold != 1.0) {
        t = t.to(torch::kFloat64) * fold;
      }
    }
    if (t.sizes() != c10::IntArrayRef(n.hf_shape))
      throw CheckpointError("tensor '" + n.keel + "' has shape " + c10::str(t.sizes()) + ", " + n.hf +
                            " needs " + c10::str(c10::IntArrayRef(n.hf_shape)));
    out.emplace_back(n.hf, t.to(dtype).contiguous());
  }
  return out;
}

}  // namespace

HfExportResult export_hf(const std::string& checkpoint, const std::string& out_dir, const HfExportOptions& options) {
  HfExportResult result;
  result.checkpoint_dir = resolve_checkpoint_for_command(checkpoint);
  const std::string& dir = result.checkpoint_dir;
  const torch::Dtype dtype = export_dtype(options.dtype);

  // Refusals first: nothing is written for a model no class represents.
  Config config = checkpoint_config(dir);
  const ModelConfig& m = config.model;
  result.family = hf_family_for(m);
  check_output_dir(out_dir, options.force);

  // A checkpoint imported from a model without a tokenizer has none: the
  // model is still exported, without tokenizer files. A SentencePiece model is
  // described as a tokenizer.json (hf_tokenizer.h); a reused tokenizer.json
  // is written back byte for byte, so the model loads with its own tokenizer.
  const std::string tokenizer_path = checkpoint_tokenizer(dir);
  std::optional<Tokenizer> tokenizer;
  std::string proto;
  SpmModel spm;
  nlohmann::ordered_json tokenizer_json;
  HfTokenIds ids;
  if (!tokenizer_path.empty()) {
    tokenizer.emplace(tokenizer_path);
    if (tokenizer->vocab_size() > m.vocab_size)
      throw CheckpointError(tokenizer_path + ": " + std::to_string(tokenizer->vocab_size()) +
                            " pieces, more than model.vocab_size = " + std::to_string(m.vocab_size));
    proto = tokenizer->serialized();
    if (tokenizer->is_sentencepiece()) {
      spm = parse_spm_model(proto, tokenizer_path);
      tokenizer_json = hf_tokenizer_json(spm, tokenizer_path);
    }
    ids = {tokenizer->bos_id(), tokenizer->eos_id(), tokenizer->pad_id()};
  } else {
    std::cerr << "keel: export-hf: warning: " << dir << " has no tokenizer.model or tokenizer.json; exporting the model only\n";
  }

  Transformer model(m);
  load_checkpoint_weights(dir, model, options.weights);
  TensorMap tensors = hf_tensors(model, m, result.family, dtype);
  result.tensors = static_cast<int64_t>(tensors.size());

  prepare_output_dir(out_dir, options.force);
  // transformers reads the "format" metadata and refuses files without "pt".
  write_output_file(out_dir, "model.safetensors", [&](const std::string& p) {
    write_safetensors(p, tensors, {{"format", "pt"}, {"keel_version", KEEL_VERSION}});
  });
  write_output_json(out_dir, "config.json", hf_config_json(m, result.family, ids, options.dtype));
  write_output_json(out_dir, "generation_config.json", hf_generation_config_json(ids));
  result.files = {"model.safetensors", "config.json", "generation_config.json"};
  if (tokenizer && tokenizer->is_sentencepiece()) {
    write_output_file(out_dir, "tokenizer.model", [&](const std::string& p) { write_file_durably(p, proto); });
    write_output_json(out_dir, "tokenizer.json", tokenizer_json);
    write_output_json(out_dir, "tokenizer_config.json",
                      hf_tokenizer_config_json(spm, ids.bos, ids.eos, ids.pad, tokenizer->unk_id(), m.max_seq_len));
    write_output_json(out_dir, "special_tokens_map.json",
                      hf_special_tokens_map_json(spm, ids.bos, ids.eos, ids.pad, tokenizer->unk_id()));
    for (const char* f : {"tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
      result.files.push_back(f);
  } else if (tokenizer) {
    const TokenOf token_of = [&](int64_t id) { return tokenizer->piece(static_cast<int32_t>(id)); };
    write_output_file(out_dir, "tokenizer.json", [&](const std::string& p) { write_file_durably(p, proto); });
    write_output_json(out_dir, "tokenizer_config.json",
                      hf_tokenizer_config_json(token_of, ids.bos, ids.eos, ids.pad, tokenizer->unk_id(), m.max_seq_len));
    write_output_json(out_dir, "special_tokens_map.json",
                      hf_special_tokens_map_json(token_of, ids.bos, ids.eos, ids.pad, tokenizer->unk_id()));
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) result.files.push_back(f);
  }
  fsync_dir(out_dir);
  return result;
}

}  // namespace keel
