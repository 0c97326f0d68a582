// The decoder-only transformer: embedding, n_layers blocks in one of four norm
// layouts (docs/papers.md#block-layouts), final norm, output head. Short enough to read in
// one sitting; every architectural choice is a key in ModelConfig.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "config/config.h"
#include "model/attention.h"
#include "model/documents.h"
#include "model/fused_ops.h"
#include "model/norm.h"
#include "model/rope.h"

namespace keel {

// swiglu: down(silu(gate x) * up x); geglu_tanh: down(gelu_tanh(gate x) * up x)
// (Gemma's gelu_pytorch_tanh); gelu: down(gelu(up x)) with the exact erf GELU.
class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& cfg);
  torch::Tensor forward(const torch::Tensor& x);
  int64_t matmul_weights() const;      // elements of w_gate, w_up, w_down: what FLOPs count
  bool gated;                          // swiglu and geglu_tanh
  MlpKind kind;                        // model.mlp
  torch::Tensor w_gate, w_up, w_down;  // gelu uses w_up and w_down only
  torch::Tensor b_gate, b_up, b_down;
  SigmaReparam w_gate_sigma{nullptr}, w_up_sigma{nullptr}, w_down_sigma{nullptr};  // model.sigma_reparam
};
TORCH_MODULE(Mlp);

// The RMS of named activations of one forward (keel coordcheck), as device
// scalars: read them after the forward, with one sync.
struct ActivationRms {
  std::vector<std::string> names;
  std::vector<torch::Tensor> values;   // RMS
  std::vector<torch::Tensor> max_abs;  // max |x| (outlier features)
  // keel replay --numerics: keep each activation whole (fp64 copies), and
  // let a planted fault change the residual stream where it is recorded.
  bool keep = false;
  std::vector<torch::Tensor> kept;
  std::function<torch::Tensor(const std::string&, const torch::Tensor&)> transform;
  void add(const std::string& name, const torch::Tensor& x);
  // The residual stream at `name`: transformed when a transform is set, then recorded.
  torch::Tensor observe(const std::string& name, const torch::Tensor& x);
};

class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const ModelConfig& cfg);
  // `rms` (optional) records "<prefix>attn" and "<prefix>mlp", the branch
  // outputs as the residual stream receives them.
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, AttentionStats* stats,
                        ActivationRms* rms = nullptr, const std::string& prefix = "",
                        const DocumentLayout* docs = nullptr);
  // A residual branch's output as the stream receives it: × its LayerScale
  // gains (when model.layer_scale is set) and × residual_mult.
  torch::Tensor branch(const torch::Tensor& layer_scale, const torch::Tensor& f) const {
    const auto g = layer_scale.defined() ? f * layer_scale : f;
    return residual_mult == 1.0 ? g : g * residual_mult;
  }

  NormPlacement placement;
  double residual_mult = 1.0;  // completep: each branch x (base_depth/n_layers)^alpha (model/parametrization.h)
  Attention attn{nullptr};
  Mlp mlp{nullptr};
  // pre/post/reordered use attn_norm and mlp_norm; sandwich adds the *_post_norm pair.
  // With model.qkv_norm there is no attn_norm (the attention normalises its QKV output).
  Norm attn_norm{nullptr}, mlp_norm{nullptr}, attn_post_norm{nullptr}, mlp_post_norm{nullptr};
  // model.layer_scale (Touvron et al. 2021): [d_model] gains on the attention and MLP branches; undefined when off.
  torch::Tensor attn_layer_scale, mlp_layer_scale;
};
TORCH_MODULE(Block);

struct ForwardOptions {
  // Fill one AttentionStats per layer (blockwise attention path).
  std::vector<AttentionStats>* attention_stats = nullptr;
  // Record activation RMS: "embed", "block<i>.attn", "block<i>.mlp",
  // "block<i>.out" (the residual stream after block i), "hidden" (what the head reads).
  ActivationRms* activations = nullptr;
};

class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& cfg);
  // idx: [B, T] int64 token ids. Returns logits [B, T, padded_vocab], fp32 when
  // a final softcap is set; padded ids get -inf so they are never predicted.
  torch::Tensor forward(const torch::Tensor& idx, const ForwardOptions& options = {});
  // The forward up to the final norm and µP's readout multiplier
  // (model/parametrization.h; 1 under standard): [B, T, d_model]. forward() is
  // head_logits(forward_hidden()); the chunked loss (chunked_loss.h) takes
  // the hidden states and the head instead of whole logits.
  torch::Tensor forward_hidden(const torch::Tensor& idx, const ForwardOptions& options = {});
  torch::Tensor head_logits(const torch::Tensor& hidden);

  const ModelConfig& config() const { return cfg_; }
  double output_mult() const { return output_mult_; }  // µP's readout multiplier (1 under standard)
  // Once per optimizer step, before its forwards: each module's per-step
  // state starts afresh (sigmaReparam's power iteration, QK-clip's per-head
  // maxima), so the step runner need not know which knobs have any.
  void begin_step();
  // data.document_mask: from now on each token attends only to its own
  // document, the documents read from the ids of each forward
  // (model/documents.h). Off (the default) when masking.eos_id < 0.
  void set_documents(const DocumentMasking& masking) { documents_ = masking; }
  // train.fp32_head: under autocast the head's matmul in fp32, so the logits
  // (and their growth) are fp32 from the GEMM on (Megatron's fp32 output layer).
  void set_fp32_head(bool on) { fp32_head_ = on; }
  bool fp32_head() const { return fp32_head_; }
  // train.activation_checkpointing: which blocks keep only their input in a
  // training forward and recompute the rest in backward (activation_checkpoint.h).
  void set_activation_checkpointing(ActivationCheckpointing mode, int64_t every_n) {
    checkpointing_ = mode;
    checkpoint_every_n_ = every_n;
  }
  bool checkpoints_block(size_t i) const {
    return recomputes_block(checkpointing_, checkpoint_every_n_, static_cast<int64_t>(i));
  }
  const DocumentMasking& documents() const { return documents_; }
  // The attention kernel a training forward of [batch, seq_len] runs (AttentionImpl::kernel_name).
  std::string attention_kernel(int64_t batch, int64_t seq_len, torch::Device device, torch::ScalarType dtype);

  torch::Tensor wte;      // [padded_vocab, d_model]
  torch::Tensor lm_head;  // [padded_vocab, d_model]; the same tensor as wte when tied
  Norm embed_norm{nullptr}, final_norm{nullptr};
  torch::nn::ModuleList blocks;

 private:
  const RopeTables& rope_tables(int64_t T, torch::Device device);
  ModelConfig cfg_;
  double output_mult_ = 1.0;
  RopeTables rope_;
  int64_t rope_len_ = 0;
  DocumentMasking documents_;
  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::none;
  bool fp32_head_ = false;
  int64_t checkpoint_every_n_ = 1;
};
TORCH_MODULE(Transformer);

// Cross entropy over the real vocabulary plus the optional z-loss
// coef * (log Z)^2 (PaLM). All in fp32.
struct LossParts {
  torch::Tensor total;  // what backward() is called on
  torch::Tensor ce;     // mean cross entropy
  torch::Tensor z;      // mean (log Z)^2 (before the coefficient)
};
LossParts language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss_coef);

}  // namespace keel
