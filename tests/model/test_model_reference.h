// Shared helpers of the model test programs (tests/model/test_*.cpp):
// small configs, parameter perturbation, tensor comparisons, and an
// independent fp64 reference forward written from docs/papers.md#qk-norm-placements,
// docs/papers.md#block-layouts and docs/papers.md#softcaps-and-embeddings using
// only the model's parameter tensors (own norms, own RoPE rotation, own
// explicit softmax attention with a per-head loop, own MLP).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/attention.h"
#include "model/init.h"
#include "model/norm.h"
#include "model/rope.h"
#include "model/transformer.h"
#include "test_util.h"

namespace keel_model_test {

using keel_test::as;
using torch::Tensor;
using keel::EmbedNorm, keel::MlpKind, keel::NormKind, keel::NormPlacement, keel::QKNormPosition, keel::QKNormScope;

// Small enough for every program to run in seconds. vocab 50 padded to 64.
inline keel::ModelConfig tiny_config() {
  keel::ModelConfig c;
  c.vocab_size = 50;
  c.pad_vocab_multiple = 16;
  c.max_seq_len = 16;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 48;
  c.mlp = MlpKind::swiglu;
  c.norm = NormKind::rms;
  c.init.std = 0.15;  // large enough that sub-layers matter next to the residual
  return c;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Built and initialised with `seed`, then moved to `dtype` (fp64 by default).
inline keel::Transformer make_model(const keel::ModelConfig& cfg, uint64_t seed = 1,
                                    torch::Dtype dtype = torch::kFloat64) {
  auto m = keel::build_model(cfg, seed);
  m->to(dtype);
  return m;
}

// Moves every norm gain/bias, linear bias and temperature away from its init
// (gain 1, bias 0), so a norm applied in the wrong place, or a bias ignored,
// cannot hide behind an identity.
inline void perturb(keel::Transformer& m, uint64_t seed = 7) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto noise = [&](const Tensor& p) {
    return at::randn(p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat64)).to(p.scalar_type());
  };
  for (auto& item : m->named_parameters(true)) {
    const std::string& name = item.key();
    Tensor& p = item.value();
    if (name.find("norm") != std::string::npos) {
      if (ends_with(name, "weight")) p.add_(0.3 * noise(p));
      else p.add_(0.2 * noise(p));
    } else if (ends_with(name, "temperature")) {
      p.add_(noise(p).abs());
    } else if (ends_with(name, "_sigma.gamma")) {  // sigmaReparam's gamma, away from 1
      p.add_(0.2 * noise(p));
    } else if (ends_with(name, "layer_scale")) {  // LayerScale's gains, away from their one init value
      p.add_(0.2 * noise(p));
    } else if (ends_with(name, "softmax_beta")) {  // the learned soft temperature, per head, kept positive
      p.add_(0.3 * noise(p).abs());
    } else if (ends_with(name, "bias")) {
      p.add_(0.1 * noise(p));
    }
  }
  for (auto& item : m->named_buffers(true))
    if (ends_with(item.key(), "temperature")) item.value().add_(noise(item.value()).abs());
}

inline Tensor random_tokens(const keel::ModelConfig& cfg, int64_t B, int64_t T, uint64_t seed = 3) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randint(0, cfg.vocab_size, {B, T}, gen, torch::TensorOptions().dtype(torch::kLong));
}

inline keel::BlockImpl* block(keel::Transformer& m, size_t i) { return m->blocks[i]->as<keel::Block>(); }
// For a temporary model: valid until the end of the full expression.
inline keel::BlockImpl* block(keel::Transformer&& m, size_t i) { return m->blocks[i]->as<keel::Block>(); }

// Max |a-b| over finite entries; infinities must coincide exactly.
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to(torch::kFloat64), y = b.to(torch::kFloat64);
  EXPECT_EQ(x.sizes(), y.sizes());
  auto fa = torch::isfinite(x), fb = torch::isfinite(y);
  EXPECT_TRUE(torch::equal(fa, fb)) << "non-finite entries differ";
  if (!torch::equal(fa, fb)) return std::numeric_limits<double>::infinity();
  auto nf = fa.logical_not();
  EXPECT_TRUE(torch::equal(x.masked_select(nf), y.masked_select(nf))) << "infinities differ";
  if (fa.sum().item<int64_t>() == 0) return 0.0;
  return (x.masked_select(fa) - y.masked_select(fa)).abs().max().item<double>();
}

inline double max_abs(const Tensor& a) {
  auto x = a.to(torch::kFloat64);
  auto f = x.masked_select(torch::isfinite(x));
  return f.numel() ? f.abs().max().item<double>() : 0.0;
}

// |a-b| <= atol + rtol*max|b| (one scale for the whole tensor).
#define EXPECT_TENSOR_NEAR(a, b, rtol, atol)                                                \
  do {                                                                                      \
    const double _d = ::keel_model_test::max_abs_diff((a), (b));                            \
    const double _tol = (atol) + (rtol) * ::keel_model_test::max_abs(b);                    \
    EXPECT_LE(_d, _tol) << "max |" #a " - " #b "| = " << _d << " > " << _tol;               \
  } while (0)

// ---------------------------------------------------------------------------
// Reference forward (fp64), straight from docs/papers.md.

inline Tensor ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  auto y = torch::matmul(x, w.t());
  return b.defined() ? y + b : y;
}

// kind: "rms" | "layernorm" | "l2"; w, b broadcast against x's trailing dims.
inline Tensor ref_norm(const Tensor& x, const std::string& kind, const Tensor& w, const Tensor& b, double eps) {
  Tensor y;
  if (kind == "rms") {
    y = x / torch::sqrt(x.pow(2).mean(-1, true) + eps);
  } else if (kind == "layernorm") {
    auto c = x - x.mean(-1, true);
    y = c / torch::sqrt(c.pow(2).mean(-1, true) + eps);  // biased variance
  } else if (kind == "l2") {
    y = x / torch::clamp_min(torch::sqrt(x.pow(2).sum(-1, true)), eps);
  } else {
    ADD_FAILURE() << "unknown norm kind " << kind;
    return x;
  }
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

// The gain a norm applies: w, or 1 + w in Gemma's form (model.norm_unit_offset).
inline Tensor ref_gain(const Tensor& w, const keel::ModelConfig& cfg) {
  return w.defined() && cfg.norm_unit_offset ? w + 1.0 : w;
}

inline Tensor ref_block_norm(const Tensor& x, keel::Norm& n, const keel::ModelConfig& cfg) {
  return ref_norm(x, keel::name_of(cfg.norm), ref_gain(n->weight, cfg), n->bias, cfg.norm_eps);
}

// Rotate-half RoPE: dimension i pairs with i + D/2, rotated by angle cos/sin[t, i].
inline Tensor ref_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t T = x.size(1), D = x.size(-1), h = D / 2;
  auto c = cos.narrow(0, 0, T).to(x.scalar_type()).view({1, T, 1, D});
  auto s = sin.narrow(0, 0, T).to(x.scalar_type()).view({1, T, 1, D});
  auto x1 = x.narrow(-1, 0, h), x2 = x.narrow(-1, h, h);
  auto y1 = x1 * c.narrow(-1, 0, h) - x2 * s.narrow(-1, 0, h);
  auto y2 = x2 * c.narrow(-1, h, h) + x1 * s.narrow(-1, h, h);
  return torch::cat({y1, y2}, -1);
}

struct RefAttentionTrace {
  std::vector<Tensor> scores;  // per head [B, T, T], scaled, before the softcap
  std::vector<Tensor> probs;   // per head [B, T, T]
  Tensor q, k;                 // [B, T, heads, D] after QK-Norm and RoPE (before temperature)
};

// sigmaReparam (Zhai et al. 2023): W * gamma / (u^T W v), with the module's u, v.
inline Tensor ref_weight(const Tensor& w, const keel::SigmaReparam& s) {
  if (!s) return w;
  auto sigma = torch::dot(s->u.to(w.scalar_type()), torch::mv(w, s->v.to(w.scalar_type())));
  return w * s->gamma.to(w.scalar_type()) / sigma;
}

// One attention layer from its parameters; query head h reads kv head h / (H / Hkv).
inline Tensor ref_attention(const Tensor& x, keel::AttentionImpl& a, const keel::ModelConfig& cfg,
                            RefAttentionTrace* trace = nullptr) {
  const int64_t B = x.size(0), T = x.size(1), H = cfg.n_heads, Hkv = cfg.n_kv_heads,
                D = cfg.d_model / cfg.n_heads;
  auto q = ref_linear(x, ref_weight(a.wq, a.wq_sigma), a.bq);
  auto k = ref_linear(x, ref_weight(a.wk, a.wk_sigma), a.bk);
  auto v = ref_linear(x, ref_weight(a.wv, a.wv_sigma), a.bv);
  if (cfg.qkv_norm != NormKind::none) {  // Rybakov et al.: one norm over the fused QKV output
    auto qkv = ref_norm(torch::cat({q, k, v}, -1), cfg.qkv_norm == NormKind::rms ? "rms" : "layernorm",
                        ref_gain(a.qkv_norm->weight, cfg), a.qkv_norm->bias, cfg.norm_eps);
    q = qkv.narrow(-1, 0, H * D), k = qkv.narrow(-1, H * D, Hkv * D), v = qkv.narrow(-1, (H + Hkv) * D, Hkv * D);
  }
  q = q.reshape({B, T, H, D}), k = k.reshape({B, T, Hkv, D}), v = v.reshape({B, T, Hkv, D});
  const auto& qc = cfg.qk_norm;
  auto qkn = [&](const Tensor& t, keel::Norm& n) -> Tensor {
    if (qc.type == NormKind::none) return t;
    const int64_t heads = t.size(2);
    if (qc.scope == QKNormScope::group) {  // heads/G consecutive heads normalised together
      const int64_t G = heads == H ? qc.groups : std::min(qc.groups, Hkv);
      return ref_norm(t.reshape({B, T, G, heads / G * D}), keel::name_of(qc.type), ref_gain(n->weight, cfg), n->bias, qc.eps)
          .view({B, T, heads, D});
    }
    if (qc.scope == QKNormScope::projection)
      return ref_norm(t.reshape({B, T, heads * D}), keel::name_of(qc.type), ref_gain(n->weight, cfg), n->bias, qc.eps)
          .view({B, T, heads, D});
    return ref_norm(t, keel::name_of(qc.type), ref_gain(n->weight, cfg), n->bias, qc.eps);  // gain [D] or [heads, D] broadcasts
  };
  auto tables = keel::make_rope_tables(T, D, cfg.rope_theta, torch::kCPU);
  const bool before = qc.position == QKNormPosition::before_rope;
  if (before) q = qkn(q, a.q_norm), k = qkn(k, a.k_norm);
  if (cfg.rope) q = ref_rope(q, tables.cos, tables.sin), k = ref_rope(k, tables.cos, tables.sin);
  if (!before) q = qkn(q, a.q_norm), k = qkn(k, a.k_norm);
  if (trace) trace->q = q, trace->k = k;

  double scale = cfg.query_pre_attn_scalar ? 1.0 / std::sqrt(*cfg.query_pre_attn_scalar)
                                           : 1.0 / std::sqrt(static_cast<double>(D));
  if (cfg.parametrization != keel::Parametrization::standard && qc.type != NormKind::l2) {
    // µP's 1/head_dim attention anchored at the base head_dim: sqrt(D_base) / D.
    const int64_t width = cfg.mup.base_width > 0 ? cfg.mup.base_width : cfg.d_model;
    const int64_t d_base = cfg.mup.base_head_dim > 0 ? cfg.mup.base_head_dim : width / cfg.n_heads;
    scale = std::sqrt(static_cast<double>(d_base)) / static_cast<double>(D);
  }
  auto allowed = torch::ones({T, T}, torch::kBool).tril();  // key j <= query i
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / (H / Hkv);
    auto qh = q.select(2, h), kh = k.select(2, g), vh = v.select(2, g);  // [B, T, D]
    auto s = torch::matmul(qh, kh.transpose(1, 2));                    // [B, T, T]
    if (qc.type == NormKind::l2) {
      auto temp = a.temperature.to(torch::kFloat64);
      s = s * temp[temp.numel() == 1 ? 0 : h].item<double>();
    } else {
      s = s * scale;
    }
    // Soft temperature: softmax(beta * scores), beta fixed or learned per head.
    if (cfg.attn_temperature_learnable) s = s * a.softmax_beta.to(torch::kFloat64)[h];  // a tensor: its gradient flows
    else if (cfg.attn_temperature) s = s * *cfg.attn_temperature;
    if (trace) trace->scores.push_back(s);
    if (cfg.attn_softcap) s = *cfg.attn_softcap * torch::tanh(s / *cfg.attn_softcap);
    if (cfg.attn_logit_clamp) s = s.clamp(-*cfg.attn_logit_clamp, *cfg.attn_logit_clamp);
    // Explicit softmax over the allowed keys.
    auto m = std::get<0>(s.masked_fill(allowed.logical_not(), -1e300).max(-1, true));
    auto e = torch::exp(s - m) * allowed.to(s.scalar_type());
    auto p = e / e.sum(-1, true);
    // Clipped softmax (Bondarenko et al. 2023): stretch to [gamma, zeta], clip to [0, 1].
    if (cfg.clipped_softmax)
      p = ((cfg.clipped_softmax_zeta - cfg.clipped_softmax_gamma) * p + cfg.clipped_softmax_gamma).clamp(0.0, 1.0);
    if (trace) trace->probs.push_back(p);
    heads.push_back(torch::matmul(p, vh));  // [B, T, D]
  }
  auto y = torch::stack(heads, 2).reshape({B, T, H * D});
  return ref_linear(y, ref_weight(a.wo, a.wo_sigma), a.bo);
}

inline Tensor ref_mlp(const Tensor& x, keel::MlpImpl& m, const keel::ModelConfig& cfg) {
  Tensor h;
  const auto w_gate = m.w_gate.defined() ? ref_weight(m.w_gate, m.w_gate_sigma) : Tensor();
  const auto w_up = ref_weight(m.w_up, m.w_up_sigma), w_down = ref_weight(m.w_down, m.w_down_sigma);
  if (cfg.mlp == MlpKind::swiglu) {
    auto g = ref_linear(x, w_gate, m.b_gate);
    h = g / (1.0 + torch::exp(-g)) * ref_linear(x, w_up, m.b_up);  // silu(g) * up
  } else if (cfg.mlp == MlpKind::geglu_tanh) {
    // Gemma's gelu_pytorch_tanh: 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), times up.
    auto g = ref_linear(x, w_gate, m.b_gate);
    const double c = std::sqrt(2.0 / M_PI);
    h = 0.5 * g * (1.0 + torch::tanh(c * (g + 0.044715 * g.pow(3)))) * ref_linear(x, w_up, m.b_up);
  } else {
    auto u = ref_linear(x, w_up, m.b_up);
    h = 0.5 * u * (1.0 + torch::erf(u / std::sqrt(2.0)));  // exact (erf) GELU
  }
  return ref_linear(h, w_down, m.b_down);
}

// Logits [B, T, padded_vocab]; padded ids -inf. `traces` gets one entry per layer.
// With `with_grad`, autograd records it (gradients of a reference loss
// reach the model's parameters through the reference's own operations).
inline Tensor ref_forward(keel::Transformer& model, const Tensor& idx,
                          std::vector<RefAttentionTrace>* traces = nullptr, bool with_grad = false) {
  c10::AutoGradMode grad_mode(with_grad);
  const keel::ModelConfig& cfg = model->config();
  const int64_t B = idx.size(0), T = idx.size(1), C = cfg.d_model;
  auto x = model->wte.index_select(0, idx.reshape({-1})).view({B, T, C});
  if (cfg.embed_norm == EmbedNorm::scale_sqrt_d) x = x * std::sqrt(static_cast<double>(C));
  else if (cfg.embed_norm == EmbedNorm::layernorm)
    x = ref_norm(x, "layernorm", ref_gain(model->embed_norm->weight, cfg), model->embed_norm->bias, cfg.norm_eps);
  else if (cfg.embed_norm == EmbedNorm::rmsnorm) x = ref_norm(x, "rms", Tensor(), Tensor(), cfg.norm_eps);
  if (traces) traces->assign(cfg.n_layers, RefAttentionTrace{});
  // CompleteP: every residual branch x (L_base / L)^alpha (Dey et al. 2025).
  double branch = 1.0;
  if (cfg.parametrization == keel::Parametrization::completep && cfg.mup.base_depth > 0)
    branch = std::pow(static_cast<double>(cfg.mup.base_depth) / static_cast<double>(cfg.n_layers), cfg.mup.depth_alpha);
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    auto* b = block(model, l);
    auto A = [&](const Tensor& t) { return ref_attention(t, *b->attn, cfg, traces ? &(*traces)[l] : nullptr); };
    auto M = [&](const Tensor& t) { return ref_mlp(t, *b->mlp, cfg); };
    auto N = [&](const Tensor& t, keel::Norm& n) { return ref_block_norm(t, n, cfg); };
    // What the stream receives from a branch: LayerScale's per-channel gains
    // (Touvron et al. 2021) when set, then CompleteP's multiplier.
    auto R = [&](const Tensor& f, const Tensor& gains) { return branch * (gains.defined() ? f * gains : f); };
    const auto &ga = b->attn_layer_scale, &gm = b->mlp_layer_scale;
    const std::string& p = keel::name_of(cfg.norm_placement);
    if (p == "pre") {  // x + f(norm(x)); with QKV-norm the attention input is not normalised
      auto h = x + R(A(cfg.qkv_norm != NormKind::none ? x : N(x, b->attn_norm)), ga);
      x = h + R(M(N(h, b->mlp_norm)), gm);
    } else if (p == "post") {  // norm(x + f(x))
      auto h = N(x + R(A(x), ga), b->attn_norm);
      x = N(h + R(M(h), gm), b->mlp_norm);
    } else if (p == "reordered") {  // x + norm(f(x))
      auto h = x + R(N(A(x), b->attn_norm), ga);
      x = h + R(N(M(h), b->mlp_norm), gm);
    } else if (p == "sandwich") {  // x + norm_post(f(norm_pre(x)))
      auto h = x + R(N(A(N(x, b->attn_norm)), b->attn_post_norm), ga);
      x = h + R(N(M(N(h, b->mlp_norm)), b->mlp_post_norm), gm);
    } else {
      ADD_FAILURE() << "unknown placement " << p;
    }
  }
  if (cfg.norm_placement != NormPlacement::post) x = ref_block_norm(x, model->final_norm, cfg);
  // µP's readout (MuReadout): the head reads x / width_mult.
  if (cfg.parametrization != keel::Parametrization::standard && cfg.mup.base_width > 0)
    x = x * (static_cast<double>(cfg.mup.base_width) / static_cast<double>(cfg.d_model));
  auto logits = torch::matmul(x, model->lm_head.t());
  if (cfg.final_softcap) logits = *cfg.final_softcap * torch::tanh(logits / *cfg.final_softcap);
  const int64_t V = cfg.vocab_size, P = logits.size(-1);
  if (P > V) logits.narrow(-1, V, P - V).fill_(-std::numeric_limits<double>::infinity());
  return logits;
}

}  // namespace keel_model_test
