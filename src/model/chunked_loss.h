// The output head and the language-model loss in one pass over chunks of
// tokens (train.loss_chunk_tokens): for each chunk, logits = h W^T in the
// compute dtype, the final softcap and the padded-vocabulary mask in fp32,
// the fp32 log-sum-exp, cross-entropy and z-loss terms, and (when training)
// the chunk's gradient with respect to the hidden states and the head, formed
// at once from the softmax. Neither the [tokens, vocab] logits nor their fp32
// copy nor the log-softmax kept for backward ever exists whole, and no logit
// is computed twice. Equal to language_model_loss(model->forward(...)) up to
// float rounding. Only `total` carries a gradient; ce and z are for logging.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "model/transformer.h"

namespace keel {

struct HeadLossOptions {
  int64_t chunk_tokens = 4096;          // rows of logits alive at once
  int64_t vocab_size = 0;               // columns >= vocab_size are padding (-inf logits)
  std::optional<double> final_softcap;  // cap * tanh(logit / cap), Gemma 2
  double z_loss_coef = 0;               // total = ce + coef * z
  // Compute dtype of the head matmul (bf16 under autocast); undefined: the
  // hidden states' dtype.
  std::optional<torch::ScalarType> compute_dtype;
};

// On the CPU a chunk's logits are also held to kMaxCpuChunkLogits elements
// (64 MiB in fp32): at a 32k vocabulary 512-token chunks cost no measurable
// time against one 2,048-token chunk and take the peak RSS of bench-cpu-tiny
// from 1,370 to 922 MiB (docs/speed.md). CUDA takes train.loss_chunk_tokens
// as given: larger chunks mean fewer launches and fuller GEMMs there.
constexpr int64_t kMaxCpuChunkLogits = int64_t{1} << 24;
constexpr int64_t kMinCpuChunkTokens = 64;
// The chunk model_loss uses: chunk_tokens, capped on the CPU as above.
int64_t cpu_chunk_tokens(int64_t chunk_tokens, int64_t padded_vocab, const torch::Device& device);

// The training loss of `model` on idx -> targets ([B, T] each): the chunked
// head when chunk_tokens > 0, else whole logits and language_model_loss.
// Under autocast the head's matmul runs in its dtype (bf16).
LossParts model_loss(TransformerImpl& model, const torch::Tensor& idx, const torch::Tensor& targets,
                     double z_loss_coef, int64_t chunk_tokens);

// hidden [N, C] (the final norm's output), head [padded_vocab, C], targets
// [N] int64. Returns the mean cross-entropy, the mean (log Z)^2 and their
// weighted total, as language_model_loss does.
LossParts chunked_head_loss(const torch::Tensor& hidden, const torch::Tensor& head, const torch::Tensor& targets,
                            const HeadLossOptions& options);

}  // namespace keel
