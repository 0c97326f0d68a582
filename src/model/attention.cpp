#include "model/attention.h"

#include <cmath>

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
      qk_type_(cfg.qk_norm.type),
      qk_scope_(cfg.qk_norm.scope),
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
  if (qk.type != "none") {
    NormKind kind = parse_norm_kind(qk.type);
    if (qk.scope == "projection") {
      q_norm = Norm(kind, q_dim, qk.gain, qk.bias, qk.eps);
      k_norm = Norm(kind, kv_dim, qk.gain, qk.bias, qk.eps);
    } else {
      std::vector<int64_t> q_shape = {head_dim_}, k_shape = {head_dim_};
      if (qk.gain_per_head) {
        q_shape = {n_heads_, head_dim_};
        k_shape = {n_kv_heads_, head_dim_};
      }
      q_norm = Norm(kind, head_dim_, qk.gain, qk.bias, qk.eps, q_shape);
      k_norm = Norm(kind, head_dim_, qk.gain, qk.bias, qk.eps, k_shape);
    }
    register_module("q_norm", q_norm);
    register_module("k_norm", k_norm);
  }
  if (qk.type == "l2") {
    // Henry et al. 2020: a learned scalar g replaces 1/sqrt(d); score = g * cos(q, k).
    auto t = torch::empty({qk.temperature_per_head ? n_heads_ : 1});
    temperature = qk.temperature_learnable ? register_parameter("temperature", t)
                                           : register_buffer("temperature", t);
    scale_ = 1.0;
  } else {
    scale_ = cfg.query_pre_attn_scalar ? 1.0 / std::sqrt(*cfg.query_pre_attn_scalar)
                                       : 1.0 / std::sqrt(static_cast<double>(head_dim_));
  }
  if (cfg.attn_softcap) softcap_ = *cfg.attn_softcap;
}

// t: [B, T, heads, head_dim]. Projection scope normalises the flattened
// [B, T, heads*head_dim] vector (OLMo 2); head scope each head's vector (Qwen3).
torch::Tensor AttentionImpl::normalize_qk(const torch::Tensor& t, Norm& norm) {
  if (!norm) return t;
  if (qk_scope_ == "projection") {
    auto flat = t.flatten(2);
    return norm->forward(flat).view(t.sizes());
  }
  return norm->forward(t);
}

torch::Tensor explicit_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 double scale, c10::optional<double> softcap, AttentionStats* stats) {
  const int64_t H = q.size(1), Hkv = k.size(1), T = q.size(2);
  auto kx = Hkv == H ? k : k.repeat_interleave(H / Hkv, 1);
  auto vx = Hkv == H ? v : v.repeat_interleave(H / Hkv, 1);
  // Scores, softcap and softmax in fp32 (Gemma 2 computes tanh in fp32).
  auto scores = torch::matmul(q.to(torch::kFloat32), kx.to(torch::kFloat32).transpose(-2, -1)) * scale;
  auto capped = softcap ? *softcap * torch::tanh(scores / *softcap) : scores;
  auto future = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  auto masked = capped.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto logp = torch::log_softmax(masked, -1);
  auto p = logp.exp();
  if (stats) {
    torch::NoGradGuard no_grad;
    auto s = scores.detach().abs().masked_fill(future, 0);
    stats->head_max_score = s.amax({0, 2, 3});
    stats->max_score = stats->head_max_score.max();
    stats->max_score_capped =
        softcap ? capped.detach().abs().masked_fill(future, 0).amax() : stats->max_score;
    auto plogp = (p.detach() * logp.detach().masked_fill(future, 0));
    stats->entropy = -plogp.sum(-1).mean();
  }
  return torch::matmul(p.to(v.scalar_type()), vx);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope, AttentionStats* stats) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = torch::nn::functional::linear(x, wq, bq).view({B, T, n_heads_, head_dim_});
  auto k = torch::nn::functional::linear(x, wk, bk).view({B, T, n_kv_heads_, head_dim_});
  auto v = torch::nn::functional::linear(x, wv, bv).view({B, T, n_kv_heads_, head_dim_});

  const bool norm_first = qk_position_ == "before_rope";
  if (norm_first) {
    q = normalize_qk(q, q_norm);
    k = normalize_qk(k, k_norm);
  }
  if (rope_) {
    q = apply_rope(q, rope);
    k = apply_rope(k, rope);
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

  torch::Tensor y;
  if (softcap_ || stats) {
    y = explicit_attention(q, k, v, scale_, softcap_, stats);
  } else {
    y = at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, /*is_causal=*/true, scale_,
                                         /*enable_gqa=*/n_kv_heads_ != n_heads_);
  }
  y = y.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_});
  return torch::nn::functional::linear(y, wo, bo);
}

}  // namespace keel
