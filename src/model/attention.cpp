#include "model/attention.h"

#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstdlib>

#include "model/blockwise_attention.h"
#include "model/cpu_attention.h"
#include "model/fused_ops.h"
#include "model/parametrization.h"

namespace keel {

double henry_temperature(int64_t L) {
  const double l = static_cast<double>(L);
  return std::log2(l * l - l);
}

AttentionImpl::AttentionImpl(const ModelConfig& cfg)
    : n_heads_(cfg.n_heads),
      n_kv_heads_(cfg.n_kv_heads),
      head_dim_(cfg.head_dim()),
      rope_(cfg.rope),
      qk_position_(cfg.qk_norm.position) {
  const int64_t C = cfg.d_model, q_dim = n_heads_ * head_dim_, kv_dim = n_kv_heads_ * head_dim_;
  wq = register_parameter("wq", torch::empty({q_dim, C}));
  wk = register_parameter("wk", torch::empty({kv_dim, C}));
  wv = register_parameter("wv", torch::empty({kv_dim, C}));
  wo = register_parameter("wo", torch::empty({C, q_dim}));
  if (cfg.bias) {
    bq = register_parameter("wq_bias", torch::empty({q_dim}));
    bk = register_parameter("wk_bias", torch::empty({kv_dim}));
    bv = register_parameter("wv_bias", torch::empty({kv_dim}));
    bo = register_parameter("wo_bias", torch::empty({C}));
  }
  const auto& qk = cfg.qk_norm;
  if (qk.type != NormKind::none) {
    NormKind kind = qk.type;
    // Every scope is a grouping of heads normalised together: head scope one
    // head per group (Qwen3), projection scope one group of all heads (OLMo
    // 2), group scope G groups in between (keys: min(G, n_kv_heads) groups).
    q_groups_ = qk.scope == QKNormScope::head ? n_heads_ : qk.scope == QKNormScope::projection ? 1 : qk.groups;
    k_groups_ = qk.scope == QKNormScope::head ? n_kv_heads_ : std::min(q_groups_, n_kv_heads_);
    const int64_t q_group_dim = n_heads_ / q_groups_ * head_dim_, k_group_dim = n_kv_heads_ / k_groups_ * head_dim_;
    std::vector<int64_t> q_shape = {q_group_dim}, k_shape = {k_group_dim};
    if (qk.gain_per_head) {  // one gain per head (group) instead of one shared
      q_shape = {q_groups_, q_group_dim};
      k_shape = {k_groups_, k_group_dim};
    }
    q_norm = Norm(kind, q_group_dim, qk.gain, qk.bias, qk.eps, q_shape, cfg.norm_unit_offset);
    k_norm = Norm(kind, k_group_dim, qk.gain, qk.bias, qk.eps, k_shape, cfg.norm_unit_offset);
    register_module("q_norm", q_norm);
    register_module("k_norm", k_norm);
  }
  if (qk.type == NormKind::l2) {
    // Henry et al. 2020: a learned scalar g replaces 1/sqrt(d); score = g * cos(q, k).
    auto t = torch::empty({qk.temperature_per_head ? n_heads_ : 1});
    temperature = qk.temperature_learnable ? register_parameter("temperature", t)
                                           : register_buffer("temperature", t);
    scale_ = 1.0;
  } else if (const auto mup_scale = forward_scaling(cfg).attn_scale) {
    scale_ = *mup_scale;  // µP: sqrt(base_head_dim)/head_dim (model/parametrization.h)
  } else {
    scale_ = cfg.query_pre_attn_scalar ? 1.0 / std::sqrt(*cfg.query_pre_attn_scalar)
                                       : 1.0 / std::sqrt(static_cast<double>(head_dim_));
  }
  // Soft temperature: softmax(beta * scores). A fixed beta folds into the
  // scale (every kernel takes it); a learned one multiplies q, per head.
  if (cfg.attn_temperature && !cfg.attn_temperature_learnable) scale_ *= *cfg.attn_temperature;
  if (cfg.attn_temperature_learnable) softmax_beta = register_parameter("softmax_beta", torch::empty({n_heads_}));
  if (cfg.clipped_softmax) clip_ = SoftmaxClip{cfg.clipped_softmax_zeta, cfg.clipped_softmax_gamma};
  if (cfg.attn_softcap) softcap_ = *cfg.attn_softcap;
  if (cfg.attn_logit_clamp) clamp_ = *cfg.attn_logit_clamp;
  if (cfg.qkv_norm != NormKind::none)
    qkv_norm = register_module("qkv_norm", Norm(cfg.qkv_norm, q_dim + 2 * kv_dim, /*gain=*/true,
                                                cfg.bias, cfg.norm_eps, std::vector<int64_t>{}, cfg.norm_unit_offset));
  if (cfg.sigma_reparam) {
    wq_sigma = register_module("wq_sigma", SigmaReparam(q_dim, C));
    wk_sigma = register_module("wk_sigma", SigmaReparam(kv_dim, C));
    wv_sigma = register_module("wv_sigma", SigmaReparam(kv_dim, C));
    wo_sigma = register_module("wo_sigma", SigmaReparam(C, q_dim));
  }
}

torch::Tensor reparam_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                             const SigmaReparam& sigma) {
  // keel::linear (fused_ops.h): oneDNN on the CPU, at::linear elsewhere.
  if (!sigma) return keel::linear(x, w, b);
  return keel::linear(x, w * sigma->scale(w).to(w.scalar_type()), b);
}

torch::Tensor fused_linear(const torch::Tensor& x, const std::vector<LinearPart>& parts) {
  if (parts.size() == 1) return reparam_linear(x, parts[0].w, parts[0].b, parts[0].sigma);
  std::vector<torch::Tensor> weights, biases;
  for (const auto& p : parts) {
    weights.push_back(p.sigma ? p.w * p.sigma->scale(p.w).to(p.w.scalar_type()) : p.w);
    if (p.b.defined()) biases.push_back(p.b);
  }
  TORCH_CHECK(biases.empty() || biases.size() == parts.size(), "fused_linear: some parts have a bias, some not");
  return keel::linear(x, torch::cat(weights, 0), biases.empty() ? torch::Tensor() : torch::cat(biases, 0));
}

torch::Tensor to_compute_dtype(const torch::Tensor& x) {
  const auto device = x.device().type();
  if (!at::autocast::is_autocast_enabled(device) || !x.is_floating_point()) return x;
  const auto dtype = at::autocast::get_autocast_dtype(device);
  return x.scalar_type() == dtype ? x : x.to(dtype);
}

// y in the dtype of the q, k or v it normalised. Under CUDA autocast a
// LayerNorm runs in fp32; its fp32 output would carry RoPE and the
// temperature in fp32 to SDPA, which casts it back anyway: twice the bytes
// of every pass in between.
static torch::Tensor in_dtype_of(const torch::Tensor& x, const torch::Tensor& y) {
  return y.scalar_type() == x.scalar_type() ? y : y.to(x.scalar_type());
}

// t: [B, T, heads, head_dim], normalised over groups of heads/groups
// consecutive heads: the whole projection (OLMo 2), each head (Qwen3), or in
// between.
torch::Tensor AttentionImpl::normalize_qk(const torch::Tensor& t, Norm& norm) {
  if (!norm) return t;
  const int64_t heads = t.size(2), groups = heads == n_heads_ ? q_groups_ : k_groups_;
  auto grouped = t.reshape({t.size(0), t.size(1), groups, heads / groups * t.size(3)});
  return in_dtype_of(t, norm->forward(grouped).view(t.sizes()));
}

torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 double scale, c10::optional<double> softcap, AttentionStats* stats,
                                 c10::optional<double> clamp, torch::Tensor* head_max, const torch::Tensor& segments,
                                 const SoftmaxClip* clip) {
  const int64_t H = q.size(1), Hkv = k.size(1), T = q.size(2);
  auto kx = Hkv == H ? k : k.repeat_interleave(H / Hkv, 1);
  auto vx = Hkv == H ? v : v.repeat_interleave(H / Hkv, 1);
  // Scores, softcap and softmax in fp32 (Gemma 2 computes tanh in fp32).
  auto scores = torch::matmul(q.to(torch::kFloat32), kx.to(torch::kFloat32).transpose(-2, -1)) * scale;
  auto capped = softcap ? *softcap * torch::tanh(scores / *softcap) : scores;
  if (clamp) capped = capped.clamp(-*clamp, *clamp);
  // Masked: the future, and under a document mask every other document. shape: [T, T] or [B, 1, T, T]
  auto future = segments.defined()
                    ? document_attention_mask(segments).logical_not()
                    : torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  auto masked = capped.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto logp = torch::log_softmax(masked, -1);
  auto p = logp.exp();
  if (head_max && !stats) {
    torch::NoGradGuard no_grad;
    *head_max = scores.detach().abs().masked_fill(future, 0).amax({0, 2, 3});
  }
  if (stats) {
    torch::NoGradGuard no_grad;
    auto s = scores.detach().abs().masked_fill(future, 0);
    stats->head_max_score = s.amax({0, 2, 3});
    if (head_max) *head_max = stats->head_max_score;
    stats->max_score = stats->head_max_score.max();
    stats->max_score_capped =
        softcap || clamp ? capped.detach().abs().masked_fill(future, 0).amax() : stats->max_score;
    auto plogp = (p.detach() * logp.detach().masked_fill(future, 0));
    stats->entropy = -plogp.sum(-1).mean();
    stats->first_token_mass = p.detach().select(-1, 0).mean();
  }
  if (clip) p = ((clip->zeta - clip->gamma) * p + clip->gamma).clamp(0.0, 1.0);  // masked: gamma < 0 -> 0
  return matmul_bf16(p.to(v.scalar_type()), vx);
}

std::pair<torch::Tensor, int64_t> document_cu_seqlens(const torch::Tensor& segments_host) {
  TORCH_CHECK(segments_host.dim() == 2 && segments_host.device().is_cpu() && segments_host.scalar_type() == torch::kInt64,
              "document_cu_seqlens: segments must be int64 [B, T] on the CPU");
  const auto seg = segments_host.contiguous();
  const int64_t B = seg.size(0), T = seg.size(1);
  const int64_t* s = seg.data_ptr<int64_t>();
  std::vector<int32_t> cu{0};
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 1; t <= T; ++t)
      if (t == T || s[b * T + t] != s[b * T + t - 1]) {  // a document ends before t
        const int64_t start = cu.back(), end = b * T + t;
        longest = std::max(longest, end - start);
        cu.push_back(static_cast<int32_t>(end));
      }
  return {torch::tensor(cu, torch::kInt32), longest};
}

bool document_varlen_requested() {
  static const bool on = [] {
    const char* v = std::getenv("KEEL_DOCUMENT_VARLEN");
    return v && std::string(v) == "1";
  }();
  return on;
}

torch::Tensor varlen_document_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                        const DocumentLayout& docs, double scale) {
  const int64_t B = q.size(0), H = q.size(1), Hkv = k.size(1), T = q.size(2), D = q.size(3);
  const auto [cu, longest] = docs.varlen();  // once per forward, for every layer
  // shape: [B * T, heads, D], the packed sequence varlen kernels take
  auto flat = [&](const torch::Tensor& t, int64_t heads) { return t.transpose(1, 2).reshape({B * T, heads, D}); };
  auto out = std::get<0>(at::_flash_attention_forward(flat(q, H), flat(k, Hkv), flat(v, Hkv), cu, cu, longest, longest,
                                                      0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale));
  return out.view({B, T, H, D}).transpose(1, 2);
}

std::string sdpa_backend_name(int64_t backend) {
  switch (static_cast<at::SDPBackend>(backend)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash_attention";
    case at::SDPBackend::efficient_attention: return "efficient_attention";
    case at::SDPBackend::cudnn_attention: return "cudnn_attention";
    case at::SDPBackend::overrideable: return "overrideable";
    case at::SDPBackend::error: return "none";
  }
  return "unknown (" + std::to_string(backend) + ")";
}

bool AttentionImpl::varlen_eligible(torch::Device device, torch::ScalarType dtype) const {
  return device.is_cuda() && document_varlen_requested() && (dtype == torch::kBFloat16 || dtype == torch::kHalf) &&
         head_dim_ % 8 == 0 && head_dim_ <= 256;  // flash's dtypes and head sizes
}

std::string AttentionImpl::kernel_name(int64_t batch, int64_t seq_len, torch::Device device,
                                       torch::ScalarType dtype, bool documents) const {
  if (clip_) return "explicit (clipped softmax)";
  if (softcap_ || clamp_ || track_head_max) return "blockwise";
  if (documents && varlen_eligible(device, dtype)) return "flash_attention_varlen";
  // SDPA's own selection, asked with tensors of the training shapes (values unused).
  auto opts = torch::TensorOptions().dtype(dtype).device(device).requires_grad(true);
  auto q = torch::empty({batch, n_heads_, seq_len, head_dim_}, opts);
  auto kv = torch::empty({batch, n_kv_heads_, seq_len, head_dim_}, opts);
  if (documents) {  // the block-diagonal causal mask instead of is_causal
    auto mask = torch::ones({batch, 1, seq_len, seq_len}, torch::TensorOptions().dtype(torch::kBool).device(device));
    return sdpa_backend_name(at::_fused_sdp_choice(q, kv, kv, mask, 0.0, /*is_causal=*/false, scale_,
                                                   /*enable_gqa=*/n_kv_heads_ != n_heads_)) + " with a document mask";
  }
  if (cpu_causal_attention_applies(device, dtype))
    return "keel causal (CPU, " + cpu_causal_attention_gemm(seq_len) +
           (cpu_causal_attention_saved_probs(seq_len) > 0 ? ", probabilities kept" : "") + ")";
  return sdpa_backend_name(at::_fused_sdp_choice(q, kv, kv, c10::nullopt, 0.0, /*is_causal=*/true, scale_,
                                                 /*enable_gqa=*/n_kv_heads_ != n_heads_));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope, AttentionStats* stats,
                                     const DocumentLayout* docs) {
  const int64_t B = x.size(0), T = x.size(1);
  const int64_t q_dim = n_heads_ * head_dim_, kv_dim = n_kv_heads_ * head_dim_;
  // q, k and v in one GEMM, on the input cast once (to_compute_dtype). shape: [B, T, q_dim + 2 kv_dim]
  auto qkv = fused_linear(to_compute_dtype(x), {{wq, bq, wq_sigma}, {wk, bk, wk_sigma}, {wv, bv, wv_sigma}});
  // One norm over the fused [q, k, v] output (Rybakov et al. 2024, "QKV_norm").
  if (qkv_norm) qkv = in_dtype_of(qkv, qkv_norm->forward(qkv));
  // Views, not copies; split's backward is one cat (narrow's would zero-fill three full-width tensors).
  auto parts = qkv.split_with_sizes({q_dim, kv_dim, kv_dim}, -1);
  auto q = parts[0].view({B, T, n_heads_, head_dim_});  // shape: [B, T, H, D], row stride q_dim + 2 kv_dim
  auto k = parts[1].view({B, T, n_kv_heads_, head_dim_});
  auto v = parts[2].view({B, T, n_kv_heads_, head_dim_});

  const bool norm_first = qk_position_ == QKNormPosition::before_rope;
  if (norm_first) {
    q = normalize_qk(q, q_norm);
    k = normalize_qk(k, k_norm);
  }
  if (rope_) {
    const torch::Tensor positions = docs ? docs->positions : torch::Tensor();
    q = apply_rope(q, rope, positions);
    k = apply_rope(k, rope, positions);
  }
  if (!norm_first) {
    q = normalize_qk(q, q_norm);
    k = normalize_qk(k, k_norm);
  }
  q = q.transpose(1, 2);  // [B, H, T, D]
  k = k.transpose(1, 2);
  v = v.transpose(1, 2);
  if (stats) {
    torch::NoGradGuard no_grad;
    auto qn = q.detach().to(torch::kFloat32).norm(2, -1), kn = k.detach().to(torch::kFloat32).norm(2, -1);
    stats->q_norm_mean = qn.mean();
    stats->q_norm_max = qn.max();
    stats->k_norm_mean = kn.mean();
    stats->k_norm_max = kn.max();
  }
  if (temperature.defined()) q = q * temperature.view({1, -1, 1, 1}).to(q.scalar_type());
  if (softmax_beta.defined()) q = q * softmax_beta.view({1, -1, 1, 1}).to(q.scalar_type());

  torch::Tensor y;
  const bool track = track_head_max && torch::GradMode::is_enabled();  // training forwards only
  if (clip_) {
    torch::Tensor hm;
    y = explicit_attention(q, k, v, scale_, softcap_, stats, clamp_, track || stats ? &hm : nullptr,
                           docs ? docs->segments : torch::Tensor(), &*clip_);
    if (track) head_max = head_max.defined() ? torch::maximum(head_max, hm) : hm;
  } else if (sdpa_path(stats != nullptr) && docs && varlen_eligible(q.device(), q.scalar_type()) &&
      k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type()) {
    y = varlen_document_attention(q, k, v, *docs, scale_);
  } else if (sdpa_path(stats != nullptr) && docs) {
    // The block-diagonal causal mask, [B, 1, T, T] bools.
    y = at::scaled_dot_product_attention(q, k, v, docs->mask(), 0.0,
                                         /*is_causal=*/false, scale_, /*enable_gqa=*/n_kv_heads_ != n_heads_);
  } else if (sdpa_path(stats != nullptr)) {
    y = cpu_causal_attention(q, k, v, scale_);  // undefined where it does not apply (not CPU fp32, ...)
    if (!y.defined())
      y = at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, /*is_causal=*/true, scale_,
                                           /*enable_gqa=*/n_kv_heads_ != n_heads_);
  } else {
    BlockwiseOptions o;
    o.scale = scale_;
    o.softcap = softcap_;
    o.clamp = clamp_;
    o.block_q = o.block_k = blockwise_block_size(q.device().type(), T);
    o.head_max = track || stats;
    o.stats = stats != nullptr;
    if (docs) {
      o.segments = docs->segments;
      o.segments_host = docs->segments_host();
    }
    BlockwiseResult r = blockwise_attention(q, k, v, o);
    y = r.out;
    if (track) head_max = head_max.defined() ? torch::maximum(head_max, r.head_max) : r.head_max;
    if (stats) {
      stats->head_max_score = r.head_max;
      stats->max_score = r.head_max.max();
      stats->max_score_capped = softcap_ || clamp_ ? r.max_capped : stats->max_score;
      stats->entropy = r.entropy;
      stats->first_token_mass = r.first_token_mass;
    }
  }
  y = y.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_});
  return reparam_linear(y, wo, bo, wo_sigma);
}

}  // namespace keel
