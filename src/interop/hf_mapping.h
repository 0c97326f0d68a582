// Which Hugging Face transformers class represents a keel model exactly, why
// a configuration has none, and how the tensors are named on each side.
//
// Mapped layouts (transformers 5.x modeling_*.py; docs/papers.md#qk-norm-placements,
// docs/papers.md#block-layouts, docs/papers.md#softcaps-and-embeddings):
//   Llama   (llama)        pre-norm, no QK-Norm; optional attention + MLP biases
//   Qwen3   (qwen3)        pre-norm, RMSNorm(head_dim) QK-Norm per head, shared gain, before RoPE
//   OLMo 2  (olmo2)        reordered norm x + norm(f(x)), RMSNorm QK-Norm over the whole q/k projection
//   Gemma 2 (gemma2)       sandwich norm, sqrt(d) embedding scale, query_pre_attn_scalar, optional softcaps
//   Gemma 3 (gemma3_text)  Gemma 2's layout plus RMSNorm(head_dim) QK-Norm per head before RoPE
// All use RoPE in the rotate-half convention (keel's, see model/rope.h), RMSNorm
// with one eps for block and QK norms (config.rms_norm_eps), and a gated MLP
// whose activation is config.hidden_act (silu for swiglu, gelu_pytorch_tanh
// for geglu_tanh). Gemma's norms apply x_hat * (1 + w); the others x_hat * w.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace keel {

enum class HfFamily { llama, qwen3, olmo2, gemma2, gemma3 };

// Gemma 2 and 3 share the sandwich norms, (1+w) gains and scaled embeddings.
inline bool is_gemma(HfFamily f) { return f == HfFamily::gemma2 || f == HfFamily::gemma3; }

struct HfFamilyInfo {
  HfFamily family;
  std::string model_type;    // config.json "model_type"
  std::string architecture;  // config.json "architectures"[0]
  std::string display;       // "OLMo 2"
  bool unit_offset_norms;    // norms compute x_hat * (1 + w) (Gemma)
  bool qk_norm;              // the class always has q_norm/k_norm
};

const HfFamilyInfo& hf_family_info(HfFamily family);
std::optional<HfFamily> hf_family_from_model_type(const std::string& model_type);

// The model.* keys the mapping interprets (or that change nothing the classes
// compute: init.*, pad_vocab_multiple). Every other model key, including
// keys added after this mapping, is refused unless it is at its default.
bool hf_mapping_reads(const std::string& key);

// Every reason (config key: why) that no mapped class represents `m`; empty
// when one does, which is then stored in *family.
ConfigErrors hf_export_refusals(const ModelConfig& m, HfFamily* family);
// The family, or ConfigError listing every reason.
HfFamily hf_family_for(const ModelConfig& m);

// How a tensor's values change between the two sides.
enum class TensorRole {
  plain,       // copied
  norm_gain,   // gain offset converted: w_hf = w_keel + keel_offset - hf_offset
  vocab_rows,  // keel's [padded_vocab, d] table; Hugging Face gets the first vocab_size rows
  unit_gain,   // a gain keel does not have (model.qk_norm.gain: false): exported as the identity gain
};

struct HfTensorName {
  std::string keel;  // parameter name in keel's model (empty for unit_gain)
  std::string hf;    // name in model.safetensors of the Hugging Face model
  TensorRole role;
  std::vector<int64_t> hf_shape;
};

// Every tensor of `m` as `family` names it, in Hugging Face's module order.
// A tied head has no lm_head.weight (transformers ties it to the embedding).
std::vector<HfTensorName> hf_tensor_names(const ModelConfig& m, HfFamily family);

// model.parametrization mup/completep: the forward multipliers no mapped class
// has (model/parametrization.h), folded into exported tensors: keel tensor
// name -> factor its values (a gain's effective value) are multiplied by.
// µP's readout multiplier goes into an untied lm_head; the attention scale's
// ratio to 1/sqrt(head_dim) into wq (and its bias) or, with QK-Norm, the q
// gain; CompleteP's branch multiplier into each branch's last tensor (wo and
// w_down with their biases for pre; the post-norm gains for reordered and
// sandwich). What cannot be folded is refused by hf_export_refusals.
std::vector<std::pair<std::string, double>> hf_fold_factors(const ModelConfig& m);

// Hugging Face buffers that older checkpoints carry and that are recomputed
// on load (rotary inv_freq); skipped by import.
bool is_ignorable_hf_tensor(const std::string& name);

}  // namespace keel
