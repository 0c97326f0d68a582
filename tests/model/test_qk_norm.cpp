// QK-Norm (docs/papers.md#qk-norm-placements): every type (rms, layernorm, l2), scope (head,
// projection), position (before/after RoPE) and gain layout equals the
// reference forward, and each does what the published definition says.
#include "model/fused_ops.h"
#include "test_model_reference.h"

using namespace keel_model_test;

namespace {

keel::ModelConfig qk_config(const std::string& type, const std::string& scope = "head",
                            const std::string& position = "before_rope") {
  auto cfg = tiny_config();
  cfg.qk_norm.type = as<NormKind>(type);
  cfg.qk_norm.scope = as<QKNormScope>(scope);
  cfg.qk_norm.position = as<QKNormPosition>(position);
  return cfg;
}

std::vector<keel::AttentionStats> stats_of(keel::Transformer& model, const torch::Tensor& idx) {
  std::vector<keel::AttentionStats> st;
  keel::ForwardOptions o;
  o.attention_stats = &st;
  torch::NoGradGuard no_grad;
  model->forward(idx, o);
  return st;
}

void scale_qk_projections(keel::Transformer& model, double factor) {
  torch::NoGradGuard no_grad;
  for (size_t l = 0; l < model->blocks->size(); ++l) {
    block(model, l)->attn->wq.mul_(factor);
    block(model, l)->attn->wk.mul_(factor);
  }
}

// Same parameters, different config (e.g. the other position): copy by name.
keel::Transformer with_params_of(keel::Transformer& src, const keel::ModelConfig& cfg) {
  auto m = make_model(cfg, 1234);
  auto p = src->named_parameters(true);
  torch::NoGradGuard no_grad;
  for (auto& item : m->named_parameters(true)) item.value().copy_(p[item.key()]);
  auto b = src->named_buffers(true);
  for (auto& item : m->named_buffers(true)) item.value().copy_(b[item.key()]);
  return m;
}

struct QkCase {
  std::string type, scope, position;
  std::string gain;  // off | shared | per_head
  bool bias;         // layernorm only
};

std::string qk_case_name(const QkCase& c) {
  return c.type + "/" + c.scope + "/" + c.position + "/gain " + c.gain + (c.bias ? "/bias" : "");
}

keel::ModelConfig qk_case_config(const QkCase& c) {
  auto cfg = qk_config(c.type, c.scope, c.position);
  cfg.qk_norm.gain = c.gain != "off";
  cfg.qk_norm.gain_per_head = c.gain == "per_head";
  cfg.qk_norm.bias = c.bias;
  return cfg;
}

// Every scope x position x gain layout (x bias for layernorm) of one type
// against the reference forward, with perturbed (non-uniform) gains.
void check_type_against_reference(const std::string& type) {
  std::vector<QkCase> cases;
  for (const char* scope : {"head", "projection"})
    for (const char* pos : {"before_rope", "after_rope"})
      for (const char* gain : {"off", "shared", "per_head"}) {
        if (std::string(scope) == "projection" && std::string(gain) == "per_head") continue;
        cases.push_back({type, scope, pos, gain, false});
        if (type == "layernorm") cases.push_back({type, scope, pos, gain, true});
      }
  for (const auto& c : cases) {
    SCOPED_TRACE(qk_case_name(c));
    auto cfg = qk_case_config(c);
    auto model = make_model(cfg, 17);
    perturb(model, 18);
    auto idx = random_tokens(cfg, 2, 9);
    torch::NoGradGuard no_grad;
    auto want = ref_forward(model, idx);
    EXPECT_TENSOR_NEAR(model->forward(idx), want, 1e-10, 1e-12);
    // The QK-Norm is not a no-op: the model without it computes something else.
    auto none_cfg = cfg;
    none_cfg.qk_norm = keel::QKNormConfig{};
    auto none = with_params_of(model, none_cfg);
    EXPECT_GT(max_abs_diff(none->forward(idx), want), 1e-4);
  }
}

// Qwen3 / OLMo 2 / Gemma 3: RMSNorm.
TEST(QkNorm, RmsMatchesReference) { check_type_against_reference("rms"); }
// ViT-22B / Wortsman / Chameleon: LayerNorm, with and without bias.
TEST(QkNorm, LayerNormMatchesReference) { check_type_against_reference("layernorm"); }
// Henry et al. / nGPT: L2 with a temperature replacing 1/sqrt(d).
TEST(QkNorm, L2MatchesReference) { check_type_against_reference("l2"); }

// Henry et al.: with unit q, k the score is temperature * cos, so however
// large the raw projections, |score| <= temperature (per head here).
TEST(QkNorm, L2ScoreBoundedByTemperature) {
  auto cfg = qk_config("l2");
  cfg.qk_norm.gain = false;
  cfg.qk_norm.temperature_per_head = true;
  cfg.qk_norm.temperature_learnable = false;
  auto model = make_model(cfg, 5);
  const std::vector<double> temps = {1.5, 3.0, 6.0, 12.0};
  {
    torch::NoGradGuard no_grad;
    for (int64_t l = 0; l < cfg.n_layers; ++l)
      block(model, l)->attn->temperature.copy_(torch::tensor(temps, torch::kFloat64));
  }
  scale_qk_projections(model, 1000.0);
  auto idx = random_tokens(cfg, 2, 16);
  auto st = stats_of(model, idx);
  for (const auto& s : st) {
    for (int64_t h = 0; h < cfg.n_heads; ++h) {
      EXPECT_LE(s.head_max_score[h].item<double>(), temps[h] * (1 + 1e-6)) << "head " << h;
      EXPECT_GT(s.head_max_score[h].item<double>(), 0.05 * temps[h]);
    }
    EXPECT_NEAR(s.q_norm_mean.item<double>(), 1.0, 1e-5);  // unit vectors
    EXPECT_NEAR(s.q_norm_max.item<double>(), 1.0, 1e-5);
    EXPECT_NEAR(s.k_norm_max.item<double>(), 1.0, 1e-5);
  }
  // Without the norm the same weights give enormous scores.
  auto none_cfg = tiny_config();
  auto none = with_params_of(model, none_cfg);
  EXPECT_GT(stats_of(none, idx)[0].max_score.item<double>(), 1e4);
}

// Temperature init: log2(L^2 - L), L = henry_seq_len or max_seq_len; or explicit.
TEST(QkNorm, HenryTemperatureInit) {
  for (int64_t L : {2, 16, 97, 1024})
    EXPECT_NEAR(keel::henry_temperature(L), std::log(double(L) * double(L - 1)) / std::log(2.0), 1e-12) << L;
  EXPECT_DOUBLE_EQ(keel::henry_temperature(2), 1.0);
  EXPECT_NEAR(keel::henry_temperature(1024), 19.99859, 1e-5);

  auto cfg = qk_config("l2");
  cfg.max_seq_len = 16;
  auto t = block(make_model(cfg), 0)->attn->temperature;
  ASSERT_EQ(t.numel(), 1);
  EXPECT_NEAR(t.item<double>(), std::log2(240.0), 1e-6);

  cfg.qk_norm.henry_seq_len = 97;
  cfg.qk_norm.temperature_per_head = true;
  t = block(make_model(cfg), 1)->attn->temperature;
  ASSERT_EQ(t.numel(), cfg.n_heads);
  EXPECT_TENSOR_NEAR(t, torch::full({cfg.n_heads}, std::log2(97.0 * 96.0), torch::kFloat64), 0, 1e-5);

  cfg.qk_norm.temperature_init = 7.5;
  cfg.qk_norm.temperature_learnable = false;
  auto m = make_model(cfg);
  t = block(m, 0)->attn->temperature;
  EXPECT_TENSOR_NEAR(t, torch::full({cfg.n_heads}, 7.5, torch::kFloat64), 0, 1e-6);
  // Not learnable: a buffer, not a parameter.
  for (auto& item : m->named_parameters(true)) EXPECT_EQ(item.key().find("temperature"), std::string::npos);
  EXPECT_EQ(m->named_buffers(true).size(), static_cast<size_t>(cfg.n_layers));
}

// L2 replaces 1/sqrt(d): with temperature g, score = g * cos(q, k). One layer,
// one token, so the single score is exactly g * cos(q, k).
TEST(QkNorm, L2ScoreIsTemperatureTimesCosine) {
  auto cfg = qk_config("l2");
  cfg.qk_norm.gain = false;
  cfg.rope = false;
  cfg.n_layers = 1;
  auto model = make_model(cfg, 9);
  EXPECT_DOUBLE_EQ(block(model, 0)->attn->score_scale(), 1.0);
  auto idx = random_tokens(cfg, 1, 1);
  auto st = stats_of(model, idx);
  auto* a = block(model, 0)->attn.get();
  torch::NoGradGuard no_grad;
  auto x = ref_block_norm(model->wte.index_select(0, idx.reshape({-1})), block(model, 0)->attn_norm, cfg);
  auto q = torch::matmul(x, a->wq.t()).view({cfg.n_heads, -1});
  auto k = torch::matmul(x, a->wk.t()).view({cfg.n_kv_heads, -1});
  const double g = a->temperature.item<double>();
  for (int64_t h = 0; h < cfg.n_heads; ++h) {
    auto qh = q[h], kh = k[h / 2];
    const double cos = (torch::dot(qh, kh) / (qh.norm() * kh.norm())).item<double>();
    EXPECT_NEAR(st[0].head_max_score[h].item<double>(), std::abs(g * cos), 1e-5);
  }
}

// Head scope normalises each head's vector (Qwen3): every head has RMS 1.
// Projection scope normalises the whole projection (OLMo 2): a head 10x
// larger than the others stays larger. Crafted by scaling head 0 of wq/wk.
TEST(QkNorm, HeadAndProjectionScopeDiffer) {
  auto head_cfg = qk_config("rms", "head");
  head_cfg.qk_norm.gain = false;
  auto head = make_model(head_cfg, 23);
  {
    torch::NoGradGuard no_grad;
    for (int64_t l = 0; l < head_cfg.n_layers; ++l) {
      block(head, l)->attn->wq.narrow(0, 0, head_cfg.head_dim()).mul_(10);
      block(head, l)->attn->wk.narrow(0, 0, head_cfg.head_dim()).mul_(10);
    }
  }
  auto proj_cfg = head_cfg;
  proj_cfg.qk_norm.scope = QKNormScope::projection;
  auto proj = with_params_of(head, proj_cfg);
  EXPECT_EQ(block(proj, 0)->attn->q_norm->dim, proj_cfg.n_heads * proj_cfg.head_dim());
  EXPECT_EQ(block(proj, 0)->attn->k_norm->dim, proj_cfg.n_kv_heads * proj_cfg.head_dim());
  EXPECT_EQ(block(head, 0)->attn->q_norm->dim, head_cfg.head_dim());
  auto idx = random_tokens(head_cfg, 2, 10);
  const double sqrt_d = std::sqrt(double(head_cfg.head_dim()));
  auto sh = stats_of(head, idx), sp = stats_of(proj, idx);
  for (int64_t l = 0; l < head_cfg.n_layers; ++l) {
    EXPECT_NEAR(sh[l].q_norm_mean.item<double>(), sqrt_d, 1e-4);
    EXPECT_NEAR(sh[l].q_norm_max.item<double>(), sqrt_d, 1e-4);
    EXPECT_NEAR(sh[l].k_norm_max.item<double>(), sqrt_d, 1e-4);
    EXPECT_GT(sp[l].q_norm_max.item<double>(), 2.0 * sp[l].q_norm_mean.item<double>());
    EXPECT_GT(sp[l].q_norm_max.item<double>(), 1.5 * sqrt_d);
  }
  torch::NoGradGuard no_grad;
  EXPECT_GT(max_abs_diff(head->forward(idx), proj->forward(idx)), 1e-3);
}

// The RMS of the whole projection is 1 with projection scope (unit gain).
TEST(QkNorm, ProjectionScopeNormalisesWholeProjection) {
  const int64_t H = 4, D = 8;
  keel::Norm n(keel::NormKind::rms, H * D, true, false, 1e-6);
  n->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  n->weight.fill_(1.0);
  auto x = torch::randn({2, 5, H, D}, torch::kFloat64);
  x.select(2, 0).mul_(10);
  auto y = n->forward(x.flatten(2)).view({2, 5, H, D});
  auto rms_all = y.pow(2).mean({2, 3}).sqrt();
  EXPECT_TENSOR_NEAR(rms_all, torch::ones_like(rms_all), 0, 1e-6);
  auto rms_head0 = y.select(2, 0).pow(2).mean(-1).sqrt();
  EXPECT_GT(rms_head0.min().item<double>(), 1.5);
}

// RoPE is a rotation: it commutes with pure L2 (and gain-free RMS) normalisation,
// so before/after are the same model; with a non-uniform gain, or LayerNorm's
// mean subtraction, the order matters.
TEST(QkNorm, BeforeAndAfterRope) {
  struct Case {
    std::string type;
    bool gain;
    bool equal;
  };
  for (const Case& c : std::vector<Case>{{"l2", false, true},
                                         {"rms", false, true},
                                         {"l2", true, false},
                                         {"rms", true, false},
                                         {"layernorm", false, false},
                                         {"layernorm", true, false}}) {
    SCOPED_TRACE(c.type + (c.gain ? " gain" : " no gain"));
    auto before_cfg = qk_config(c.type, "head", "before_rope");
    before_cfg.qk_norm.gain = c.gain;
    auto before = make_model(before_cfg, 29);
    perturb(before, 30);  // non-uniform gains
    auto after_cfg = before_cfg;
    after_cfg.qk_norm.position = QKNormPosition::after_rope;
    auto after = with_params_of(before, after_cfg);
    auto idx = random_tokens(before_cfg, 2, 12);
    torch::NoGradGuard no_grad;
    const double d = max_abs_diff(before->forward(idx), after->forward(idx));
    if (c.equal) EXPECT_LE(d, 1e-6);  // RoPE tables are fp32: a rotation to ~1e-7
    else EXPECT_GT(d, 1e-4);
    // Without RoPE the position is irrelevant for every type.
    auto nr_before_cfg = before_cfg, nr_after_cfg = after_cfg;
    nr_before_cfg.rope = nr_after_cfg.rope = false;
    auto nb = with_params_of(before, nr_before_cfg), na = with_params_of(before, nr_after_cfg);
    EXPECT_LE(max_abs_diff(nb->forward(idx), na->forward(idx)), 1e-12);
  }
}

// Gain shapes: shared [head_dim] (Qwen3), per head [heads, head_dim]
// (Chameleon), projection [heads*head_dim] (OLMo 2), none without gain; l2
// temperature [1] or [n_heads].
TEST(QkNorm, GainAndTemperatureShapes) {
  const int64_t H = 4, K = 2, D = 8;
  auto shape = [](const torch::Tensor& t) { return t.defined() ? t.sizes().vec() : std::vector<int64_t>{}; };
  using V = std::vector<int64_t>;
  for (const char* type : {"rms", "layernorm", "l2"}) {
    SCOPED_TRACE(type);
    auto cfg = qk_config(type);
    {
      auto m = make_model(cfg);
      auto* at = block(m, 0)->attn.get();
      EXPECT_EQ(shape(at->q_norm->weight), (V{D}));
      EXPECT_EQ(shape(at->k_norm->weight), (V{D}));
      EXPECT_FALSE(at->q_norm->bias.defined());
    }
    cfg.qk_norm.gain_per_head = true;
    {
      auto m = make_model(cfg);
      auto* at = block(m, 0)->attn.get();
      EXPECT_EQ(shape(at->q_norm->weight), (V{H, D}));
      EXPECT_EQ(shape(at->k_norm->weight), (V{K, D}));
    }
    cfg.qk_norm.gain_per_head = false;
    cfg.qk_norm.scope = QKNormScope::projection;
    {
      auto m = make_model(cfg);
      auto* at = block(m, 0)->attn.get();
      EXPECT_EQ(shape(at->q_norm->weight), (V{H * D}));
      EXPECT_EQ(shape(at->k_norm->weight), (V{K * D}));
    }
    cfg.qk_norm.gain = false;
    {
      auto m = make_model(cfg);
      EXPECT_FALSE(block(m, 0)->attn->q_norm->weight.defined());
      EXPECT_FALSE(block(m, 0)->attn->k_norm->weight.defined());
    }
  }
  auto cfg = qk_config("layernorm");
  cfg.qk_norm.bias = true;
  cfg.qk_norm.gain_per_head = true;
  auto m = make_model(cfg);
  EXPECT_EQ(shape(block(m, 0)->attn->q_norm->bias), (V{H, D}));
  EXPECT_EQ(shape(block(m, 0)->attn->k_norm->bias), (V{K, D}));

  auto none = make_model(tiny_config());
  EXPECT_FALSE(static_cast<bool>(block(none, 0)->attn->q_norm));
  EXPECT_FALSE(block(none, 0)->attn->temperature.defined());
  auto l2 = qk_config("l2");
  EXPECT_EQ(shape(block(make_model(l2), 0)->attn->temperature), (V{1}));
  l2.qk_norm.temperature_per_head = true;
  EXPECT_EQ(shape(block(make_model(l2), 0)->attn->temperature), (V{H}));
  EXPECT_FALSE(block(make_model(qk_config("rms")), 0)->attn->temperature.defined());
}

// Per-head gain/bias: head h uses row h (Chameleon's separate gamma/beta per head).
TEST(QkNorm, PerHeadGainAppliesRowPerHead) {
  const int64_t H = 3, D = 6;
  keel::Norm n(keel::NormKind::layernorm, D, true, true, 1e-5, std::vector<int64_t>{H, D});
  n->to(torch::kFloat64);
  torch::NoGradGuard no_grad;
  n->weight.copy_(torch::randn({H, D}, torch::kFloat64));
  n->bias.copy_(torch::randn({H, D}, torch::kFloat64));
  auto x = torch::randn({2, 4, H, D}, torch::kFloat64) * 5 + 3;
  auto y = n->forward(x);
  for (int64_t h = 0; h < H; ++h) {
    auto xh = x.select(2, h);
    auto mu = xh.mean(-1, true), var = (xh - mu).pow(2).mean(-1, true);
    auto want = (xh - mu) / torch::sqrt(var + 1e-5) * n->weight[h] + n->bias[h];
    EXPECT_TENSOR_NEAR(y.select(2, h), want, 1e-12, 1e-12);
  }
}

// rms QK-norm with unit gain: each head's query and key has RMS exactly 1
// (norm sqrt(head_dim)), whatever the scale of the projections.
TEST(QkNorm, RmsUnitRmsPerHead) {
  for (const char* pos : {"before_rope", "after_rope"}) {
    SCOPED_TRACE(pos);
    auto cfg = qk_config("rms", "head", pos);
    auto model = make_model(cfg, 37);
    scale_qk_projections(model, 50.0);
    auto st = stats_of(model, random_tokens(cfg, 2, 12));
    const double sqrt_d = std::sqrt(double(cfg.head_dim()));
    for (const auto& s : st) {
      EXPECT_NEAR(s.q_norm_mean.item<double>(), sqrt_d, 1e-4);
      EXPECT_NEAR(s.q_norm_max.item<double>(), sqrt_d, 1e-4);
      EXPECT_NEAR(s.k_norm_mean.item<double>(), sqrt_d, 1e-4);
      EXPECT_NEAR(s.k_norm_max.item<double>(), sqrt_d, 1e-4);
    }
  }
  // Without QK-norm the same weights give much larger vectors.
  auto cfg = tiny_config();
  auto model = make_model(cfg, 37);
  scale_qk_projections(model, 50.0);
  EXPECT_GT(stats_of(model, random_tokens(cfg, 2, 12))[0].q_norm_mean.item<double>(), 10 * std::sqrt(8.0));
}

// LayerNorm QK-norm (ViT-22B/Wortsman): each head's vector has zero mean and unit variance.
TEST(QkNorm, LayerNormZeroMeanUnitVariancePerHead) {
  const int64_t H = 4, D = 8;
  keel::Norm n(keel::NormKind::layernorm, D, false, false, 1e-6, std::vector<int64_t>{D});
  auto x = torch::randn({2, 5, H, D}, torch::kFloat64) * 7 + 2;
  auto y = n->forward(x);
  EXPECT_TENSOR_NEAR(y.mean(-1), torch::zeros({2, 5, H}, torch::kFloat64), 0, 1e-10);
  EXPECT_TENSOR_NEAR(y.pow(2).mean(-1), torch::ones({2, 5, H}, torch::kFloat64), 0, 1e-6);
}

// L2 in bf16 on the composite path (what CUDA runs): the norm and the quotient
// in fp32, rounded once, so every element is within half a bf16 ulp of the
// exact x / ||x||, in x's dtype. A norm rounded to bf16 before the division
// puts about a quarter of them farther.
TEST(QkNorm, L2InBf16RoundsOnceAndKeepsTheDtype) {
  keel::CompositeOnly composite;
  const int64_t D = 64;
  keel::Norm n(keel::NormKind::l2, D, false, false, 1e-6, std::vector<int64_t>{D});
  torch::manual_seed(5);
  auto x = (torch::randn({4096, D}) * 3).to(torch::kBFloat16);
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = n->forward(x);
  }
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  auto xd = x.to(torch::kFloat64);
  auto exact = xd / xd.norm(2, -1, true).clamp_min(1e-6);
  auto yd = y.to(torch::kFloat64);
  // One bf16 ulp at each value: 2^(exponent - 7), 8 significant bits.
  auto ulp = torch::pow(2.0, torch::floor(torch::log2(torch::maximum(exact.abs(), yd.abs()))) - 7);
  auto over = ((yd - exact).abs() > 0.5 * ulp * (1 + 1e-4)).sum().item<int64_t>();
  EXPECT_EQ(over, 0) << "elements more than half an ulp from x / ||x||";
}

}  // namespace
