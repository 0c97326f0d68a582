#include "model/transformer.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <stdexcept>

#include "model/activation_checkpoint.h"
#include "model/fused_ops.h"
#include "model/parametrization.h"
#include "model/sigma_reparam.h"

namespace keel {

namespace F = torch::nn::functional;

MlpImpl::MlpImpl(const ModelConfig& cfg) : gated(cfg.mlp != MlpKind::gelu), kind(cfg.mlp) {
  const int64_t C = cfg.d_model, H = cfg.ffn_dim();
  if (gated) w_gate = register_parameter("w_gate", torch::empty({H, C}));
  w_up = register_parameter("w_up", torch::empty({H, C}));
  w_down = register_parameter("w_down", torch::empty({C, H}));
  if (cfg.bias) {
    if (gated) b_gate = register_parameter("w_gate_bias", torch::empty({H}));
    b_up = register_parameter("w_up_bias", torch::empty({H}));
    b_down = register_parameter("w_down_bias", torch::empty({C}));
  }
  if (cfg.sigma_reparam) {
    if (gated) w_gate_sigma = register_module("w_gate_sigma", SigmaReparam(H, C));
    w_up_sigma = register_module("w_up_sigma", SigmaReparam(H, C));
    w_down_sigma = register_module("w_down_sigma", SigmaReparam(C, H));
  }
}

int64_t MlpImpl::matmul_weights() const {
  return (w_gate.defined() ? w_gate.numel() : 0) + w_up.numel() + w_down.numel();
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x_in) {
  const auto x = to_compute_dtype(x_in);  // cast once for both gate and up under autocast
  torch::Tensor h;
  if (!gated) {
    const auto u = reparam_linear(x, w_up, b_up, w_up_sigma);
    h = fused_cpu_gelu(u);  // CPU fp32: one exponential per element backward (fused_ops.h); else undefined
    if (!h.defined()) h = torch::gelu(u);
  } else {
    auto g = reparam_linear(x, w_gate, b_gate, w_gate_sigma);
    auto u = reparam_linear(x, w_up, b_up, w_up_sigma);
    h = fused_cpu_glu(g, u, kind == MlpKind::swiglu);  // CPU fp32: one pass (fused_ops.h); else undefined
    // Gemma's gelu_pytorch_tanh is torch's GELU with approximate="tanh".
    if (!h.defined()) h = (kind == MlpKind::swiglu ? F::silu(g) : torch::gelu(g, "tanh")) * u;
  }
  return reparam_linear(h, w_down, b_down, w_down_sigma);
}

static Norm make_block_norm(const ModelConfig& cfg) {
  return Norm(cfg.norm, cfg.d_model, /*gain=*/true, cfg.bias, cfg.norm_eps,
              std::vector<int64_t>{}, cfg.norm_unit_offset);
}

BlockImpl::BlockImpl(const ModelConfig& cfg)
    : placement(cfg.norm_placement), residual_mult(forward_scaling(cfg).residual_mult) {
  attn = register_module("attn", Attention(cfg));
  mlp = register_module("mlp", Mlp(cfg));
  if (cfg.qkv_norm == NormKind::none) attn_norm = register_module("attn_norm", make_block_norm(cfg));
  mlp_norm = register_module("mlp_norm", make_block_norm(cfg));
  if (placement == NormPlacement::sandwich) {
    attn_post_norm = register_module("attn_post_norm", make_block_norm(cfg));
    mlp_post_norm = register_module("mlp_post_norm", make_block_norm(cfg));
  }
  if (cfg.layer_scale) {
    attn_layer_scale = register_parameter("attn_layer_scale", torch::empty({cfg.d_model}));
    mlp_layer_scale = register_parameter("mlp_layer_scale", torch::empty({cfg.d_model}));
  }
}

torch::Tensor ActivationRms::observe(const std::string& name, const torch::Tensor& x) {
  torch::Tensor out = transform ? transform(name, x) : x;
  add(name, out);
  return out;
}

void ActivationRms::add(const std::string& name, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  if (keep) kept.push_back(x.detach().to(torch::kFloat64).clone());
  names.push_back(name);
  values.push_back(x.detach().to(torch::kFloat32).pow(2).mean().sqrt());
  max_abs.push_back(x.detach().abs().amax().to(torch::kFloat32));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const RopeTables& rope, AttentionStats* stats,
                                 ActivationRms* rms, const std::string& prefix, const DocumentLayout* docs) {
  // The branches as the residual stream receives them (recorded for the coordinate check).
  auto traced = [&](const char* what, torch::Tensor f) {
    if (rms) rms->add(prefix + what, f);
    return f;
  };
  auto attn_branch = [&](const torch::Tensor& f) { return traced("attn", branch(attn_layer_scale, f)); };
  auto mlp_branch = [&](const torch::Tensor& f) { return traced("mlp", branch(mlp_layer_scale, f)); };
  switch (placement) {
    case NormPlacement::pre: {  // x + f(norm(x))
      auto h = x + attn_branch(attn->forward(attn_norm ? attn_norm->forward(x) : x, rope, stats, docs));
      return h + mlp_branch(mlp->forward(mlp_norm->forward(h)));
    }
    case NormPlacement::post: {  // norm(x + f(x)), the original Transformer
      auto h = attn_norm->forward(x + attn_branch(attn->forward(x, rope, stats, docs)));
      return mlp_norm->forward(h + mlp_branch(mlp->forward(h)));
    }
    case NormPlacement::reordered: {  // x + norm(f(x)), OLMo 2
      auto h = x + attn_branch(attn_norm->forward(attn->forward(x, rope, stats, docs)));
      return h + mlp_branch(mlp_norm->forward(mlp->forward(h)));
    }
    case NormPlacement::sandwich: {  // x + norm_post(f(norm_pre(x))), Gemma 2
      auto h = x + attn_branch(attn_post_norm->forward(attn->forward(attn_norm->forward(x), rope, stats, docs)));
      return h + mlp_branch(mlp_post_norm->forward(mlp->forward(mlp_norm->forward(h))));
    }
  }
  return x;
}

TransformerImpl::TransformerImpl(const ModelConfig& cfg) : cfg_(cfg), output_mult_(forward_scaling(cfg).output_mult) {
  const int64_t V = cfg.padded_vocab(), C = cfg.d_model;
  wte = register_parameter("wte", torch::empty({V, C}));
  lm_head = cfg.tie_embeddings ? wte : register_parameter("lm_head", torch::empty({V, C}));
  if (cfg.embed_norm == EmbedNorm::layernorm)
    embed_norm = register_module("embed_norm", Norm(NormKind::layernorm, C, true, cfg.bias, cfg.norm_eps,
                                                    std::vector<int64_t>{}, cfg.norm_unit_offset));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layers; ++i) blocks->push_back(Block(cfg));
  // Post-LN blocks already end in a norm; the other layouts need a final one.
  if (cfg.norm_placement != NormPlacement::post) final_norm = register_module("final_norm", make_block_norm(cfg));
}

void TransformerImpl::begin_step() {
  if (cfg_.sigma_reparam) sigma_reparam_power_step(*this);  // one power-iteration step per step
  for (const auto& b : *blocks) b->as<BlockImpl>()->attn->head_max = torch::Tensor();
}

std::string TransformerImpl::attention_kernel(int64_t batch, int64_t seq_len, torch::Device device,
                                              torch::ScalarType dtype) {
  if (blocks->size() == 0) return "none";
  return blocks[0]->as<BlockImpl>()->attn->kernel_name(batch, seq_len, device, dtype, documents_.enabled());
}

const RopeTables& TransformerImpl::rope_tables(int64_t T, torch::Device device) {
  if (rope_len_ < T || rope_.cos.device() != device) {
    rope_ = make_rope_tables(std::max(T, cfg_.max_seq_len), cfg_.head_dim(), cfg_.rope_theta, device);
    rope_len_ = std::max(T, cfg_.max_seq_len);
  }
  return rope_;
}

torch::Tensor TransformerImpl::forward_hidden(const torch::Tensor& idx, const ForwardOptions& options) {
  const int64_t T = idx.size(1);
  TORCH_CHECK(T <= cfg_.max_seq_len, "sequence length ", T, " exceeds model.max_seq_len ", cfg_.max_seq_len);
  auto x = F::embedding(idx, wte);
  if (cfg_.embed_norm == EmbedNorm::scale_sqrt_d) {
    // Gemma casts the multiplier to the compute dtype before multiplying.
    x = x * torch::scalar_tensor(std::sqrt(static_cast<double>(cfg_.d_model)), x.options());
  } else if (cfg_.embed_norm == EmbedNorm::layernorm) {
    x = embed_norm->forward(x);
  } else if (cfg_.embed_norm == EmbedNorm::rmsnorm) {
    x = rms_normalize(x, cfg_.norm_eps);
  }
  // Under autocast, the tables in the compute dtype once per forward, not per layer.
  const auto dt = idx.device().type();
  const RopeTables rope = rope_tables(T, idx.device())
                              .with_dtype(T, at::autocast::is_autocast_enabled(dt) ? at::autocast::get_autocast_dtype(dt)
                                                                                   : torch::kFloat32);
  // data.document_mask: the documents of this batch, from its ids (model/documents.h).
  const DocumentLayout docs = documents_.enabled() ? document_layout(idx, documents_) : DocumentLayout{};
  auto* all_stats = options.attention_stats;
  if (all_stats) all_stats->assign(blocks->size(), AttentionStats{});
  ActivationRms* rms = options.activations;
  if (rms) x = rms->observe("embed", x);
  for (size_t i = 0; i < blocks->size(); ++i) {
    const std::string prefix = rms ? "block" + std::to_string(i) + "." : "";
    AttentionStats* stats = all_stats ? &(*all_stats)[i] : nullptr;
    if (checkpoints_block(i) && torch::GradMode::is_enabled() && x.requires_grad()) {
      // The statistics come from the forward; the recompute in backward records nothing.
      std::shared_ptr<BlockImpl> block = std::dynamic_pointer_cast<BlockImpl>(blocks->ptr(i));
      auto first = std::make_shared<bool>(true);
      auto run = [block, rope, docs, stats, rms, prefix, first](const torch::Tensor& in) {
        const bool record = std::exchange(*first, false);
        return block->forward(in, rope, record ? stats : nullptr, record ? rms : nullptr, prefix,
                              docs.segments.defined() ? &docs : nullptr);
      };
      x = checkpointing_ == ActivationCheckpointing::selective ? checkpointed_keeping_linears(x, run)
                                                                : checkpointed(x, run);
    } else {
      x = blocks[i]->as<Block>()->forward(x, rope, stats, rms, prefix, docs.segments.defined() ? &docs : nullptr);
    }
    if (rms) x = rms->observe(prefix + "out", x);
  }
  if (final_norm) x = final_norm->forward(x);
  // µP's readout (mup's MuReadout): the head sees x/width_mult, so a wider
  // model's logits do not grow with the width of the dot product.
  if (output_mult_ != 1.0) x = x * output_mult_;
  if (rms) rms->add("hidden", x);
  return x;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& idx, const ForwardOptions& options) {
  return head_logits(forward_hidden(idx, options));
}

torch::Tensor TransformerImpl::head_logits(const torch::Tensor& x) {
  torch::Tensor logits;
  if (fp32_head_ && at::autocast::is_autocast_enabled(x.device().type())) {
    AutocastOff off(x.device().type());
    logits = keel::linear(x.to(torch::kFloat32), lm_head.to(torch::kFloat32));
  } else {
    logits = keel::linear(x, lm_head);  // fused_ops.h: oneDNN on the CPU
  }
  if (cfg_.final_softcap) {
    const double cap = *cfg_.final_softcap;
    logits = cap * torch::tanh(logits.to(at::promote_types(logits.scalar_type(), torch::kFloat32)) / cap);
  }
  const int64_t pad = cfg_.padded_vocab() - cfg_.vocab_size;
  if (pad > 0) logits.narrow(-1, cfg_.vocab_size, pad).fill_(-std::numeric_limits<float>::infinity());
  return logits;
}

LossParts language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets, double z_loss_coef) {
  // At least fp32 (bf16 logits are upcast; fp64 stays fp64 for exact tests).
  auto flat = logits.reshape({-1, logits.size(-1)}).to(at::promote_types(logits.scalar_type(), torch::kFloat32));
  LossParts out;
  out.ce = F::cross_entropy(flat, targets.reshape({-1}));
  out.total = out.ce;
  if (z_loss_coef > 0) {
    auto log_z = torch::logsumexp(flat, -1);
    out.z = log_z.pow(2).mean();
    out.total = out.ce + z_loss_coef * out.z;
  }
  return out;
}

}  // namespace keel
