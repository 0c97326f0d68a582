// model.* keys: the architecture. The published definitions behind qk_norm,
// norm_placement, softcaps and embed_norm are in docs/papers.md#qk-norm-placements,
// docs/papers.md#block-layouts and docs/papers.md#softcaps-and-embeddings.
#include <cmath>

#include "config/config.h"

namespace keel {

int64_t ModelConfig::ffn_dim() const {
  if (d_ff > 0) return d_ff;
  if (mlp == MlpKind::gelu) return 4 * d_model;
  // A gated MLP (SwiGLU, GeGLU) keeps the parameter count of a 4x GELU MLP: 2/3 * 4d, rounded up to 64.
  int64_t raw = (8 * d_model + 2) / 3;
  return (raw + 63) / 64 * 64;
}

void declare_model_keys(Schema& s, ModelConfig& m) {
  s.integer("model.vocab_size", &m.vocab_size, "tokenizer vocabulary size").min = 2;
  s.integer("model.pad_vocab_multiple", &m.pad_vocab_multiple,
            "pad the embedding/output rows to a multiple of this; padded ids are never predicted")
      .min = 1;
  s.integer("model.max_seq_len", &m.max_seq_len, "context length the model is built for").min = 1;
  s.integer("model.d_model", &m.d_model, "width of the residual stream").min = 1;
  s.integer("model.n_layers", &m.n_layers, "number of transformer blocks").min = 1;
  s.integer("model.n_heads", &m.n_heads, "query heads per attention layer").min = 1;
  s.integer("model.n_kv_heads", &m.n_kv_heads, "key/value heads (1 = MQA, n_heads = MHA)").min = 1;
  s.integer("model.d_ff", &m.d_ff,
            "MLP hidden width; 0 = 4*d_model (gelu) or 8/3*d_model rounded to 64 (swiglu, geglu_tanh)")
      .min = 0;
  s.choice("model.mlp", &m.mlp, {},
           "MLP type: swiglu down(silu(gate x) * up x) (Llama, Qwen3, OLMo 2); geglu_tanh the same with "
           "the tanh-approximated GELU (Gemma's gelu_pytorch_tanh); gelu down(gelu(up x)), exact erf GELU (GPT-2)");
  s.choice("model.norm", &m.norm, {NormKind::rms, NormKind::layernorm}, "norm used in blocks and the final norm");
  s.boolean("model.norm_unit_offset", &m.norm_unit_offset,
            "every norm gain (blocks, final, QK-Norm, embedding) is applied as x_hat*(1+w) with w initialised "
            "to 0, Gemma's RMSNorm form; false: x_hat*w with w initialised to 1");
  s.real("model.norm_eps", &m.norm_eps, "epsilon of block and final norms").min = 0;
  s.choice("model.norm_placement", &m.norm_placement, {},
           "block layout: pre x+f(n(x)); post n(x+f(x)); reordered (OLMo 2) x+n(f(x)); "
           "sandwich (Gemma 2) x+n2(f(n1(x)))");
  s.boolean("model.bias", &m.bias, "biases in linear layers and LayerNorms");
  s.boolean("model.tie_embeddings", &m.tie_embeddings, "output head shares the embedding matrix");
  s.boolean("model.rope", &m.rope, "rotary position embeddings on q and k");
  s.real("model.rope_theta", &m.rope_theta, "RoPE base frequency").min = 1;

  s.choice("model.qk_norm.type", &m.qk_norm.type, {},
           "normalisation of queries and keys before the dot product");
  s.choice("model.qk_norm.scope", &m.qk_norm.scope, {},
           "normalise each head's vector (Qwen3), groups of heads together (model.qk_norm.groups), or the "
           "whole projection (OLMo 2)");
  s.integer("model.qk_norm.groups", &m.qk_norm.groups,
            "group scope: number of head groups; queries are normalised over n_heads/groups heads at a "
            "time, keys over n_kv_heads/min(groups, n_kv_heads); 1 = projection scope, n_heads = head scope")
      .min = 0;
  s.choice("model.qk_norm.position", &m.qk_norm.position, {},
           "apply the norm before or after the rotary embedding");
  s.boolean("model.qk_norm.gain", &m.qk_norm.gain, "learnable per-dimension gain, initialised to 1");
  s.boolean("model.qk_norm.gain_per_head", &m.qk_norm.gain_per_head,
            "head scope: a gain per head (Chameleon) instead of one shared by heads (Qwen3)");
  s.boolean("model.qk_norm.bias", &m.qk_norm.bias, "layernorm type: learnable bias (Chameleon)");
  s.real("model.qk_norm.eps", &m.qk_norm.eps, "epsilon of the q/k norm").min = 0;
  s.boolean("model.qk_norm.temperature_learnable", &m.qk_norm.temperature_learnable,
            "l2 type: learn the temperature that replaces 1/sqrt(head_dim)");
  s.boolean("model.qk_norm.temperature_per_head", &m.qk_norm.temperature_per_head,
            "l2 type: one temperature per head instead of one per layer");
  s.optional_real("model.qk_norm.temperature_init", &m.qk_norm.temperature_init,
                  "l2 type: initial temperature; null = log2(L^2-L), Henry et al. 2020")
      .positive();
  s.integer("model.qk_norm.henry_seq_len", &m.qk_norm.henry_seq_len,
            "L in log2(L^2-L); 0 = model.max_seq_len")
      .min = 0;

  s.optional_real("model.attn_softcap", &m.attn_softcap,
                  "cap*tanh(s/cap) on attention scores, fp32 (Gemma 2: 50); null = off")
      .positive();
  s.optional_real("model.final_softcap", &m.final_softcap,
                  "cap*tanh(z/cap) on output logits, fp32 (Gemma 2: 30); null = off")
      .positive();
  s.choice("model.embed_norm", &m.embed_norm, {},
           "after the embedding lookup: Gemma's sqrt(d) scale, BLOOM's LayerNorm, or a "
           "parameter-free RMSNorm (modded-nanogpt)");
  s.optional_real("model.query_pre_attn_scalar", &m.query_pre_attn_scalar,
                  "attention scale = this^-0.5 (Gemma 2: 256); null = head_dim")
      .positive();

  s.choice("model.qkv_norm", &m.qkv_norm, {NormKind::none, NormKind::rms, NormKind::layernorm},
           "QKV-norm (Rybakov et al. 2024, arXiv 2410.16682): a norm over the concatenated q, k, v "
           "projection outputs, and no pre-attention norm in the block (pre layout)");
  s.optional_real("model.attn_logit_clamp", &m.attn_logit_clamp,
                  "hard clamp of attention scores to [-c, c] before the softmax (unlike the tanh "
                  "softcap, no effect below c); null = off")
      .positive();
  s.boolean("model.sigma_reparam", &m.sigma_reparam,
            "sigmaReparam (Zhai et al. 2023): attention and MLP weights used as (gamma/sigma(W))*W, sigma by "
            "one power-iteration step per training step, gamma learnable from 1");

  s.optional_real("model.attn_temperature", &m.attn_temperature,
                  "soft temperature (Rybakov et al. 2024's comparison): attention probabilities "
                  "softmax(beta * scores) with beta this (0.5 there); null = off")
      .positive();
  s.boolean("model.attn_temperature_learnable", &m.attn_temperature_learnable,
            "learn beta, one scalar per head, starting from model.attn_temperature");
  s.boolean("model.clipped_softmax", &m.clipped_softmax,
            "soft clip: attention probabilities clip((zeta - gamma) softmax(scores) + gamma, 0, 1) (Bondarenko et al. "
            "2023); materialises the [T, T] scores (the explicit attention path)");
  s.real("model.clipped_softmax_zeta", &m.clipped_softmax_zeta, "clipped softmax: the stretch's upper end zeta (1.03)")
      .min = 1;
  s.real("model.clipped_softmax_gamma", &m.clipped_softmax_gamma, "clipped softmax: the stretch's lower end gamma (-0.03)")
      .max = 0;
  s.optional_real("model.layer_scale", &m.layer_scale,
                  "LayerScale (Touvron et al. 2021): each residual branch times a learned per-channel "
                  "gain, all starting at this (0.1 to depth 18, 1e-5 at 24, 1e-6 deeper); null = off")
      .positive();

  s.real("model.init.std", &m.init.std, "std of the normal init of linear and embedding weights").min = 0;
  s.boolean("model.init.depth_scaled", &m.init.depth_scaled,
            "output projections use std/sqrt(2*n_layers) (GPT-2)");
  s.optional_real("model.init.truncate", &m.init.truncate,
                  "truncate the normal at +-k std; null = no truncation")
      .positive();
  s.choice("model.parametrization", &m.parametrization, {},
           "standard; mup (Yang et al. 2022): init, AdamW LR and weight decay of hidden matrices by fan-in ratio, "
           "logits x base_width/d_model, attention scale 1/head_dim with a base; completep (Dey et al. 2025): "
           "mup plus residual branches x (base_depth/n_layers)^alpha with its LR and AdamW eps rules "
           "(docs/papers.md#mup-and-completep)");
  s.integer("model.mup.base_width", &m.mup.base_width, "d_model of the base model the LR was tuned on; 0 = d_model")
      .min = 0;
  s.integer("model.mup.base_head_dim", &m.mup.base_head_dim,
            "head_dim of the base model; 0 = base_width/n_heads (the base has the same number of heads)")
      .min = 0;
  s.integer("model.mup.base_depth", &m.mup.base_depth, "completep: n_layers of the base model; 0 = n_layers").min = 0;
  auto& da = s.real("model.mup.depth_alpha", &m.mup.depth_alpha,
                    "completep: residual branches x (base_depth/n_layers)^alpha; 1 = CompleteP, 0.5 = depth-muP");
  da.min = 0.5;
  da.max = 1.0;
}

ModelConfig base_model_config(const ModelConfig& m) {
  ModelConfig b = m;
  if (m.parametrization == Parametrization::standard) return b;
  const int64_t width = m.mup.base_width > 0 ? m.mup.base_width : m.d_model;
  const int64_t head_dim = m.mup.base_head_dim > 0 ? m.mup.base_head_dim
                           : m.n_heads > 0        ? width / m.n_heads
                                                  : 0;
  b.d_model = width;
  if (head_dim > 0 && m.n_heads > 0) {
    b.n_heads = width / head_dim;
    b.n_kv_heads = m.n_kv_heads * b.n_heads / m.n_heads;
  }
  if (m.d_ff > 0 && m.d_model > 0) b.d_ff = m.d_ff * width / m.d_model;
  if (m.parametrization == Parametrization::completep && m.mup.base_depth > 0) b.n_layers = m.mup.base_depth;
  b.mup = MupConfig{};
  b.parametrization = Parametrization::standard;
  return b;
}

namespace {

// model.parametrization mup/completep: the base model must be a model keel
// can build, and knobs that undo or fight the width rules are refused.
void check_parametrization(const ModelConfig& m, ConfigErrors& e) {
  const auto& u = m.mup;
  const std::string p = name_of(m.parametrization);
  if (m.parametrization == Parametrization::standard) {
    const MupConfig d;
    if (u.base_width != d.base_width || u.base_head_dim != d.base_head_dim || u.base_depth != d.base_depth ||
        u.depth_alpha != d.depth_alpha)
      e.add("model.mup", "only used with model.parametrization: mup or completep (got standard)");
    return;
  }
  if (m.parametrization == Parametrization::mup && (u.base_depth != 0 || u.depth_alpha != 1.0))
    e.add("model.mup.base_depth", "depth transfer (base_depth, depth_alpha) needs model.parametrization: completep");
  if (m.n_heads <= 0 || m.d_model % m.n_heads != 0) return;  // reported above
  const int64_t width = u.base_width > 0 ? u.base_width : m.d_model;
  const int64_t head_dim = u.base_head_dim > 0 ? u.base_head_dim : width / m.n_heads;
  if (u.base_head_dim == 0 && width % m.n_heads != 0)
    e.add("model.mup.base_width", std::to_string(width) + " is not divisible by model.n_heads = " +
                                      std::to_string(m.n_heads) + " (the base model keeps the head count)");
  else if (width % head_dim != 0)
    e.add("model.mup.base_head_dim", std::to_string(head_dim) + " does not divide model.mup.base_width = " +
                                         std::to_string(width));
  else if ((m.n_kv_heads * (width / head_dim)) % m.n_heads != 0 || m.n_kv_heads * (width / head_dim) < m.n_heads)
    e.add("model.mup.base_head_dim", "the base model's " + std::to_string(width / head_dim) +
                                         " query heads cannot keep the ratio n_heads/n_kv_heads = " +
                                         std::to_string(m.n_heads) + "/" + std::to_string(m.n_kv_heads));
  else if (m.rope && head_dim % 2 != 0)
    e.add("model.mup.base_head_dim", "the base head_dim " + std::to_string(head_dim) + " is odd; RoPE rotates pairs");
  if (m.d_ff > 0 && (m.d_ff * width) % m.d_model != 0)
    e.add("model.d_ff", std::to_string(m.d_ff) + " x base_width/d_model = " + std::to_string(m.d_ff) + " x " +
                            std::to_string(width) + "/" + std::to_string(m.d_model) +
                            " is not a whole number: the base model's MLP width is undefined");
  if (m.sigma_reparam)
    e.add("model.sigma_reparam", "conflicts with model.parametrization: " + p +
                                     ": sigmaReparam fixes each weight's spectral norm to a learned gamma, which "
                                     "overrides the width-dependent init and update sizes muP sets");
  if (m.embed_norm == EmbedNorm::scale_sqrt_d)
    e.add("model.embed_norm", "scale_sqrt_d conflicts with model.parametrization: " + p +
                                  ": a sqrt(d_model) multiplier makes the embedding output grow with width, "
                                  "which muP keeps constant (use none, layernorm or rmsnorm)");
  if (m.query_pre_attn_scalar)
    e.add("model.query_pre_attn_scalar", "conflicts with model.parametrization: " + p +
                                             ", which sets the attention scale to sqrt(base_head_dim)/head_dim");
  if (m.parametrization == Parametrization::completep && m.norm_placement == NormPlacement::post)
    e.add("model.norm_placement", "post conflicts with model.parametrization: completep: depth-muP scales "
                                  "residual branches on an identity residual stream, which Post-LN's norm after "
                                  "every addition removes (use pre, reordered or sandwich)");
}

}  // namespace

void check_model(const ModelConfig& m, ConfigErrors& e) {
  check_parametrization(m, e);
  if (m.n_heads > 0 && m.d_model % m.n_heads != 0)
    e.add("model.d_model", std::to_string(m.d_model) + " is not divisible by model.n_heads = " +
                               std::to_string(m.n_heads));
  if (m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads != 0)
    e.add("model.n_heads", std::to_string(m.n_heads) + " is not divisible by model.n_kv_heads = " +
                               std::to_string(m.n_kv_heads));
  if (m.n_kv_heads > m.n_heads)
    e.add("model.n_kv_heads", std::to_string(m.n_kv_heads) + " exceeds model.n_heads = " +
                                  std::to_string(m.n_heads));
  if (m.rope && m.n_heads > 0 && m.d_model % m.n_heads == 0 && m.head_dim() % 2 != 0)
    e.add("model.d_model", "head_dim = d_model/n_heads = " + std::to_string(m.head_dim()) +
                               " is odd; RoPE rotates pairs of dimensions (set model.rope: false or "
                               "change d_model/n_heads)");
  const auto& q = m.qk_norm;
  if (q.type == NormKind::l2 && q.bias)
    e.add("model.qk_norm.bias", "only the layernorm type has a bias");
  if (q.type == NormKind::rms && q.bias)
    e.add("model.qk_norm.bias", "RMSNorm has no bias; use type: layernorm");
  if (q.type != NormKind::l2 && q.temperature_init)
    e.add("model.qk_norm.temperature_init", "only used with type: l2 (got type: " + name_of(q.type) + ")");
  if (q.type == NormKind::l2) {
    int64_t L = q.henry_seq_len > 0 ? q.henry_seq_len : m.max_seq_len;
    if (!q.temperature_init && L < 2)
      e.add("model.qk_norm.henry_seq_len", "log2(L^2-L) needs L >= 2");
    if (m.query_pre_attn_scalar)
      e.add("model.query_pre_attn_scalar",
            "conflicts with model.qk_norm.type: l2, whose temperature replaces the attention scale");
  }
  if (q.scope == QKNormScope::group) {
    const int64_t g = q.groups;
    if (q.type == NormKind::none || q.type == NormKind::l2)
      e.add("model.qk_norm.scope", "group scope needs type rms or layernorm (got " + name_of(q.type) + ")");
    else if (g <= 0 || m.n_heads % g != 0)
      e.add("model.qk_norm.groups", std::to_string(g) + " must be positive and divide model.n_heads = " +
                                        std::to_string(m.n_heads));
    else if (m.n_kv_heads % std::min(g, m.n_kv_heads) != 0)
      e.add("model.qk_norm.groups", "min(groups, n_kv_heads) = " + std::to_string(std::min(g, m.n_kv_heads)) +
                                        " must divide model.n_kv_heads = " + std::to_string(m.n_kv_heads));
  } else if (q.groups != 0) {
    e.add("model.qk_norm.groups", "only used with model.qk_norm.scope: group");
  }
  if (m.attn_temperature_learnable && !m.attn_temperature)
    e.add("model.attn_temperature_learnable", "needs model.attn_temperature, the starting beta");
  if (!m.clipped_softmax && (m.clipped_softmax_zeta != 1.03 || m.clipped_softmax_gamma != -0.03))
    e.add(m.clipped_softmax_zeta != 1.03 ? "model.clipped_softmax_zeta" : "model.clipped_softmax_gamma",
          "only used with model.clipped_softmax: true");
  if (m.qkv_norm != NormKind::none && m.norm_placement != NormPlacement::pre)
    e.add("model.qkv_norm", "replaces the pre-attention norm, so it needs model.norm_placement: pre (got " +
                                name_of(m.norm_placement) + ")");
  if (q.scope == QKNormScope::projection && q.gain_per_head)
    e.add("model.qk_norm.gain_per_head", "projection scope already has one gain per dimension of "
                                         "the whole projection");
}

}  // namespace keel
