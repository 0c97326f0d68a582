// Attention: GQA equals MHA with repeated K/V heads, MHA equals a hand-written
// attention, causality for every layout, the fused (SDPA) path equals the
// explicit one, softcaps bound scores and logits, padded vocabulary ids are
// never predicted, and the attention statistics are what they claim. Also
// the kernel counts the step's speed depends on: q/k/v in one GEMM, one cast
// of a sublayer's input under autocast, RoPE in four kernels each way.
#include "test_model_reference.h"

#include "model/fused_ops.h"
#include "train/device.h"
#include "train/op_counter.h"

using namespace keel_model_test;

namespace {

// Rows of a [Hkv*D, ...] tensor rearranged so query head h gets kv head h / (H/Hkv).
torch::Tensor repeat_kv_rows(const torch::Tensor& t, int64_t H, int64_t Hkv, int64_t D) {
  std::vector<torch::Tensor> parts;
  for (int64_t h = 0; h < H; ++h) parts.push_back(t.narrow(0, (h / (H / Hkv)) * D, D));
  return torch::cat(parts, 0);
}

// The MHA twin of a GQA model: every parameter copied, wk/wv (and their biases,
// and per-head k-norm gains) expanded to one kv head per query head.
keel::Transformer mha_twin(keel::Transformer& gqa) {
  auto cfg = gqa->config();
  const int64_t H = cfg.n_heads, Hkv = cfg.n_kv_heads, D = cfg.head_dim();
  cfg.n_kv_heads = H;
  auto mha = make_model(cfg, 99);
  auto src = gqa->named_parameters(true);
  torch::NoGradGuard no_grad;
  for (auto& item : mha->named_parameters(true)) {
    const std::string& name = item.key();
    auto s = src[name];
    if (ends_with(name, "attn.wk") || ends_with(name, "attn.wv") || ends_with(name, "attn.wk_bias") ||
        ends_with(name, "attn.wv_bias")) {
      s = repeat_kv_rows(s, H, Hkv, D);
    } else if (name.find("k_norm") != std::string::npos && s.dim() == 2) {  // per-head gain [Hkv, D]
      s = repeat_kv_rows(s, H, Hkv, 1);
    }
    TORCH_CHECK(item.value().sizes() == s.sizes(), "shape mismatch for ", name);
    item.value().copy_(s);
  }
  for (auto& item : mha->named_buffers(true)) item.value().copy_(gqa->named_buffers(true)[item.key()]);
  return mha;
}

struct GqaCase {
  const char* name;
  int64_t n_kv_heads;
  std::function<void(keel::ModelConfig&)> edit;
};

TEST(Gqa, RepeatedKvWeightsEqualMhaExactly) {
  const std::vector<GqaCase> cases = {
      {"plain", 2, [](keel::ModelConfig&) {}},
      {"mqa", 1, [](keel::ModelConfig&) {}},
      {"bias_qk_rms_per_head_gain", 2,
       [](keel::ModelConfig& c) {
         c.bias = true;
         c.qk_norm.type = NormKind::rms;
         c.qk_norm.gain_per_head = true;
       }},
      {"qk_layernorm_bias_after_rope", 2,
       [](keel::ModelConfig& c) {
         c.qk_norm.type = NormKind::layernorm;
         c.qk_norm.bias = true;
         c.qk_norm.gain_per_head = true;
         c.qk_norm.position = QKNormPosition::after_rope;
       }},
      {"l2_per_head_temperature", 2,
       [](keel::ModelConfig& c) {
         c.qk_norm.type = NormKind::l2;
         c.qk_norm.temperature_per_head = true;
       }},
      {"softcaps_sandwich", 2,
       [](keel::ModelConfig& c) {
         c.attn_softcap = 3.0;
         c.final_softcap = 4.0;
         c.norm_placement = NormPlacement::sandwich;
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto cfg = tiny_config();
    cfg.n_kv_heads = c.n_kv_heads;
    c.edit(cfg);
    auto gqa = make_model(cfg, 31);
    perturb(gqa, 32);
    auto mha = mha_twin(gqa);
    ASSERT_EQ(block(mha, 0)->attn->wk.size(0), cfg.n_heads * cfg.head_dim());
    auto idx = random_tokens(cfg, 2, 10);
    torch::NoGradGuard no_grad;
    auto a = gqa->forward(idx), b = mha->forward(idx);
    // fp64; the explicit (softcap) path scores in fp32, so allow its rounding.
    const double tol = cfg.attn_softcap ? 1e-6 : 1e-12;
    EXPECT_TENSOR_NEAR(a, b, tol, tol);
    // The explicit path too (statistics requested).
    std::vector<keel::AttentionStats> sa, sb;
    keel::ForwardOptions oa, ob;
    oa.attention_stats = &sa;
    ob.attention_stats = &sb;
    EXPECT_TENSOR_NEAR(gqa->forward(idx, oa), mha->forward(idx, ob), 1e-6, 1e-6);
    EXPECT_NEAR(sa[0].max_score.item<double>(), sb[0].max_score.item<double>(), 1e-5);
    // The twin is not trivially the same model: breaking the grouping changes the output.
    block(mha, 0)->attn->wk.narrow(0, 0, cfg.head_dim()).mul_(-1.0);
    EXPECT_GT(max_abs_diff(a, mha->forward(idx)), 1e-4);
  }
}

// A lone attention module with n_kv_heads == n_heads against the hand-written
// per-head softmax attention (and with fewer kv heads, h -> h / group).
TEST(Attention, MatchesHandWrittenAttention) {
  for (int64_t kv : {4, 2, 1}) {
    SCOPED_TRACE(kv);
    auto cfg = tiny_config();
    cfg.n_kv_heads = kv;
    cfg.bias = true;
    keel::Attention attn(cfg);
    attn->to(torch::kFloat64);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : attn->parameters()) p.copy_(torch::randn(p.sizes(), torch::kFloat64) * 0.3);
    }
    auto x = torch::randn({3, 11, cfg.d_model}, torch::kFloat64);
    auto rope = keel::make_rope_tables(cfg.max_seq_len, cfg.head_dim(), cfg.rope_theta, torch::kCPU);
    torch::NoGradGuard no_grad;
    auto got = attn->forward(x, rope);
    auto want = ref_attention(x, *attn, cfg);
    EXPECT_TENSOR_NEAR(got, want, 1e-12, 1e-12);
    EXPECT_GT(want.std().item<double>(), 0.1);
  }
}

struct CausalCase {
  std::string placement;
  bool softcaps;
};

TEST(Attention, CausalForEveryPlacementAndSoftcap) {
  for (const char* placement : {"pre", "post", "reordered", "sandwich"}) {
    for (bool softcaps : {false, true}) {
      SCOPED_TRACE(std::string(placement) + (softcaps ? " +softcaps" : ""));
      auto cfg = tiny_config();
      cfg.norm_placement = as<NormPlacement>(placement);
      if (softcaps) {
        cfg.attn_softcap = 2.0;
        cfg.final_softcap = 3.0;
        cfg.qk_norm.type = NormKind::rms;
      }
      auto model = make_model(cfg, 41);
      perturb(model, 42);
      const int64_t T = 10, t = 4;
      auto idx = random_tokens(cfg, 2, T);
      auto idx2 = idx.clone();
      idx2.select(1, t).copy_((idx.select(1, t) + 1) % cfg.vocab_size);
      torch::NoGradGuard no_grad;
      auto a = model->forward(idx), b = model->forward(idx2);
      EXPECT_LE(max_abs_diff(a.narrow(1, 0, t), b.narrow(1, 0, t)), 1e-12) << "output before t changed";
      auto real = [&](const torch::Tensor& z, int64_t pos) { return z.select(1, pos).narrow(-1, 0, cfg.vocab_size); };
      for (int64_t pos = t; pos < T; ++pos)
        EXPECT_GT(max_abs_diff(real(a, pos), real(b, pos)), 1e-9) << "output at " << pos << " unchanged";
      // Same with the explicit path.
      std::vector<keel::AttentionStats> st;
      keel::ForwardOptions o;
      o.attention_stats = &st;
      auto ea = model->forward(idx, o), eb = model->forward(idx2, o);
      EXPECT_LE(max_abs_diff(ea.narrow(1, 0, t), eb.narrow(1, 0, t)), 1e-12);
      EXPECT_GT(max_abs_diff(real(ea, t), real(eb, t)), 1e-9);
    }
  }
}

// Requesting statistics takes the blockwise path; without a softcap the
// default forward uses SDPA. Both must agree (fp32 model).
TEST(Attention, FastPathEqualsExplicitPath) {
  struct Case {
    const char* name;
    std::function<void(keel::ModelConfig&)> edit;
  };
  const std::vector<Case> cases = {
      {"gqa", [](keel::ModelConfig&) {}},
      {"mha", [](keel::ModelConfig& c) { c.n_kv_heads = 4; }},
      {"mqa", [](keel::ModelConfig& c) { c.n_kv_heads = 1; }},
      {"l2_temperature", [](keel::ModelConfig& c) { c.qk_norm.type = NormKind::l2; c.qk_norm.temperature_per_head = true; }},
      {"query_pre_attn_scalar", [](keel::ModelConfig& c) { c.query_pre_attn_scalar = 3.0; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto cfg = tiny_config();
    c.edit(cfg);
    auto model = make_model(cfg, 51, torch::kFloat32);
    perturb(model, 52);
    EXPECT_TRUE(block(model, 0)->attn->sdpa_path(false)) << "no cap: SDPA";
    auto idx = random_tokens(cfg, 2, 12);
    torch::NoGradGuard no_grad;
    std::vector<keel::AttentionStats> st;
    keel::ForwardOptions o;
    o.attention_stats = &st;
    auto fast = model->forward(idx), slow = model->forward(idx, o);
    EXPECT_TENSOR_NEAR(fast, slow, 1e-5, 1e-6);
  }
  auto cfg = tiny_config();
  cfg.attn_softcap = 50.0;
  auto model = make_model(cfg);
  EXPECT_FALSE(block(model, 0)->attn->sdpa_path(false)) << "a softcap takes the blockwise path";
  block(model, 0)->attn->track_head_max = true;
  EXPECT_FALSE(block(model, 0)->attn->sdpa_path(false));
  {
    torch::NoGradGuard no_grad;  // QK-clip tracks training forwards only
    auto plain = make_model(tiny_config());
    block(plain, 0)->attn->track_head_max = true;
    EXPECT_TRUE(block(plain, 0)->attn->sdpa_path(false));
    EXPECT_FALSE(block(plain, 0)->attn->sdpa_path(true)) << "statistics take the blockwise path";
  }
}

// explicit_attention against the fused kernel directly, MHA/GQA/MQA.
TEST(Attention, ExplicitAttentionEqualsSdpa) {
  torch::manual_seed(0);
  const int64_t B = 2, H = 4, T = 9, D = 16;
  for (int64_t kv : {4, 2, 1}) {
    SCOPED_TRACE(kv);
    auto q = torch::randn({B, H, T, D}, torch::kFloat64);
    auto k = torch::randn({B, kv, T, D}, torch::kFloat64);
    auto v = torch::randn({B, kv, T, D}, torch::kFloat64);
    const double scale = 0.37;
    auto got = keel::explicit_attention(q, k, v, scale, c10::nullopt, nullptr);
    auto want = at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, true, scale, kv != H);
    EXPECT_TENSOR_NEAR(got, want, 1e-5, 1e-6);
    keel::AttentionStats st;
    EXPECT_TRUE(torch::equal(got, keel::explicit_attention(q, k, v, scale, c10::nullopt, &st)));
    // And in fp32, as used in training.
    auto got32 = keel::explicit_attention(q.to(torch::kFloat32), k.to(torch::kFloat32), v.to(torch::kFloat32),
                                          scale, c10::nullopt, nullptr);
    EXPECT_EQ(got32.scalar_type(), torch::kFloat32);
    EXPECT_TENSOR_NEAR(got32, want, 1e-5, 1e-6);
  }
}

// Hand formula of Gemma 2: scale, cap*tanh(s/cap), causal mask, softmax.
TEST(Attention, ExplicitSoftcapMatchesHandFormula) {
  torch::manual_seed(1);
  const int64_t B = 2, H = 4, Hkv = 2, T = 7, D = 8;
  auto q = torch::randn({B, H, T, D}, torch::kFloat64) * 3;
  auto k = torch::randn({B, Hkv, T, D}, torch::kFloat64) * 3;
  auto v = torch::randn({B, Hkv, T, D}, torch::kFloat64);
  const double scale = 0.5, cap = 2.5;
  keel::AttentionStats st;
  auto got = keel::explicit_attention(q, k, v, scale, cap, &st);
  auto want = torch::zeros({B, H, T, D}, torch::kFloat64);
  double max_raw = 0, max_capped = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double raw = scale * torch::dot(q[b][h][i], k[b][h / 2][j]).item<double>();
          max_raw = std::max(max_raw, std::abs(raw));
          s[j] = cap * std::tanh(raw / cap);
          max_capped = std::max(max_capped, std::abs(s[j]));
          m = std::max(m, s[j]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - m));
        for (int64_t j = 0; j <= i; ++j) want[b][h][i] += (s[j] / z) * v[b][h / 2][j];
      }
  EXPECT_TENSOR_NEAR(got, want, 1e-5, 1e-6);
  EXPECT_NEAR(st.max_score.item<double>(), max_raw, 1e-4 * max_raw);
  EXPECT_NEAR(st.max_score_capped.item<double>(), max_capped, 1e-5);
  EXPECT_GT(max_raw, 2 * cap);  // the cap was active
  EXPECT_LE(st.max_score_capped.item<double>(), cap);
}

// Softcap in the model: huge q/k projections make raw scores exceed the cap;
// the capped maximum stays below it and equals cap*tanh(raw max / cap).
TEST(Attention, AttentionSoftcapBoundsScores) {
  auto cfg = tiny_config();
  cfg.attn_softcap = 5.0;
  auto model = make_model(cfg, 61, torch::kFloat32);
  {
    torch::NoGradGuard no_grad;
    for (int64_t l = 0; l < cfg.n_layers; ++l) {
      block(model, l)->attn->wq.mul_(20);
      block(model, l)->attn->wk.mul_(20);
    }
  }
  std::vector<keel::AttentionStats> st;
  keel::ForwardOptions o;
  o.attention_stats = &st;
  torch::NoGradGuard no_grad;
  auto logits = model->forward(random_tokens(cfg, 2, 12), o);
  EXPECT_TRUE(torch::isfinite(logits.narrow(-1, 0, cfg.vocab_size)).all().item<bool>());
  for (const auto& s : st) {
    const double raw = s.max_score.item<double>(), capped = s.max_score_capped.item<double>();
    EXPECT_GT(raw, 5.0 * 3);
    EXPECT_LE(capped, 5.0);
    EXPECT_NEAR(capped, 5.0 * std::tanh(raw / 5.0), 1e-5);
    EXPECT_FLOAT_EQ(s.head_max_score.max().item<float>(), s.max_score.item<float>());
  }
}

// Final softcap: |logit| <= cap on the real vocabulary although the raw
// logits are far larger; padded ids are -inf and never the argmax.
TEST(Attention, FinalSoftcapBoundsLogitsAndPaddingIsNeverPredicted) {
  for (bool cap : {false, true}) {
    SCOPED_TRACE(cap ? "final_softcap" : "no cap");
    auto cfg = tiny_config();
    if (cap) cfg.final_softcap = 3.0;
    auto model = make_model(cfg, 71, torch::kFloat32);
    ASSERT_EQ(cfg.padded_vocab(), 64);
    {
      torch::NoGradGuard no_grad;
      model->lm_head.mul_(200);
      // Padded rows of the head made to dominate: must still never be predicted.
      model->lm_head.narrow(0, cfg.vocab_size, cfg.padded_vocab() - cfg.vocab_size).fill_(1e3);
    }
    torch::NoGradGuard no_grad;
    auto logits = model->forward(random_tokens(cfg, 2, 12));
    ASSERT_EQ(logits.size(-1), cfg.padded_vocab());
    auto real = logits.narrow(-1, 0, cfg.vocab_size), pad = logits.narrow(-1, cfg.vocab_size, 64 - 50);
    EXPECT_TRUE(torch::isfinite(real).all().item<bool>());
    EXPECT_TRUE((pad == -std::numeric_limits<float>::infinity()).all().item<bool>());
    EXPECT_TRUE((logits.argmax(-1) < cfg.vocab_size).all().item<bool>());
    EXPECT_EQ(torch::softmax(logits, -1).narrow(-1, cfg.vocab_size, 14).max().item<float>(), 0.0f);
    if (cap) {
      EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
      EXPECT_LE(real.abs().max().item<double>(), 3.0);
      EXPECT_GT(real.abs().max().item<double>(), 2.9);  // saturated: the raw logits were huge
    } else {
      EXPECT_GT(real.abs().max().item<double>(), 30.0);
    }
  }
}

// With a final softcap, logits equal cap*tanh(raw/cap) of the uncapped model.
TEST(Attention, FinalSoftcapIsTanhOfUncappedLogits) {
  auto cfg = tiny_config();
  auto plain = make_model(cfg, 81);
  cfg.final_softcap = 2.0;
  auto capped = make_model(cfg, 81);
  auto idx = random_tokens(cfg, 1, 8);
  torch::NoGradGuard no_grad;
  {
    plain->lm_head.mul_(10);
    capped->lm_head.mul_(10);
  }
  auto raw = plain->forward(idx).narrow(-1, 0, cfg.vocab_size);
  auto got = capped->forward(idx).narrow(-1, 0, cfg.vocab_size);
  EXPECT_GT(raw.abs().max().item<double>(), 4.0);
  EXPECT_TENSOR_NEAR(got, 2.0 * torch::tanh(raw / 2.0), 1e-6, 1e-6);
}

// Statistics against the reference forward's scores and probabilities.
TEST(Attention, StatisticsMatchReference) {
  auto cfg = tiny_config();
  cfg.attn_softcap = 4.0;
  auto model = make_model(cfg, 91);
  perturb(model, 92);
  auto idx = random_tokens(cfg, 2, 9);
  std::vector<keel::AttentionStats> st;
  keel::ForwardOptions o;
  o.attention_stats = &st;
  torch::NoGradGuard no_grad;
  model->forward(idx, o);
  std::vector<RefAttentionTrace> tr;
  ref_forward(model, idx, &tr);
  ASSERT_EQ(st.size(), tr.size());
  auto allowed = torch::ones({9, 9}, torch::kBool).tril();
  for (size_t l = 0; l < st.size(); ++l) {
    SCOPED_TRACE(l);
    std::vector<double> head_max;
    double entropy = 0;
    for (int64_t h = 0; h < cfg.n_heads; ++h) {
      head_max.push_back(tr[l].scores[h].abs().masked_select(allowed.expand({2, 9, 9})).max().item<double>());
      auto p = tr[l].probs[h];
      entropy += -(p * torch::log(p.clamp_min(1e-300))).sum(-1).mean().item<double>() / cfg.n_heads;
    }
    const double mx = *std::max_element(head_max.begin(), head_max.end());
    EXPECT_NEAR(st[l].max_score.item<double>(), mx, 1e-5 * mx);
    EXPECT_NEAR(st[l].max_score_capped.item<double>(), 4.0 * std::tanh(mx / 4.0), 1e-5);
    ASSERT_EQ(st[l].head_max_score.numel(), cfg.n_heads);
    for (int64_t h = 0; h < cfg.n_heads; ++h)
      EXPECT_NEAR(st[l].head_max_score[h].item<double>(), head_max[h], 1e-5 * head_max[h]);
    EXPECT_NEAR(st[l].entropy.item<double>(), entropy, 1e-5);
    EXPECT_GT(entropy, 0.05);
    EXPECT_LT(entropy, std::log(9.0));
    auto qn = tr[l].q.norm(2, -1), kn = tr[l].k.norm(2, -1);
    EXPECT_NEAR(st[l].q_norm_mean.item<double>(), qn.mean().item<double>(), 1e-5);
    EXPECT_NEAR(st[l].q_norm_max.item<double>(), qn.max().item<double>(), 1e-5);
    EXPECT_NEAR(st[l].k_norm_mean.item<double>(), kn.mean().item<double>(), 1e-5);
    EXPECT_NEAR(st[l].k_norm_max.item<double>(), kn.max().item<double>(), 1e-5);
  }
}

// query_pre_attn_scalar sets the scale to its -1/2 power (Gemma 2), else 1/sqrt(head_dim).
TEST(Attention, QueryPreAttnScalarSetsScale) {
  auto cfg = tiny_config();
  auto plain = make_model(cfg);
  EXPECT_DOUBLE_EQ(block(plain, 0)->attn->score_scale(), 1.0 / std::sqrt(8.0));  // head_dim 32/4
  cfg.query_pre_attn_scalar = 256.0;
  auto model = make_model(cfg, 3);
  EXPECT_DOUBLE_EQ(block(model, 0)->attn->score_scale(), 1.0 / 16.0);
  perturb(model, 4);
  auto idx = random_tokens(cfg, 2, 8);
  torch::NoGradGuard no_grad;
  EXPECT_TENSOR_NEAR(model->forward(idx), ref_forward(model, idx), 1e-10, 1e-12);
}

// ---------------------------------------------------------------- kernels

int64_t gemms(const keel::OpCounts& c) {
  int64_t n = 0;
  // Projections only: bmm is attention's own (SDPA's math fallback for GQA).
  for (const char* name : {"aten::mm", "aten::addmm", "mkldnn::_linear_pointwise"})
    if (auto it = c.by_name.find(name); it != c.by_name.end()) n += it->second;
  return n;
}

TEST(AttentionKernels, QkvProjectionsAreOneGemmEachWay) {
  for (bool bias : {false, true}) {
    auto cfg = tiny_config();
    cfg.bias = bias;
    auto model = make_model(cfg, 5, torch::kFloat32);
    auto& attn = *block(model, 0)->attn;
    auto x = torch::randn({2, 6, cfg.d_model}).requires_grad_(true);
    auto rope = keel::make_rope_tables(cfg.max_seq_len, cfg.head_dim(), cfg.rope_theta, torch::kCPU);
    torch::Tensor y;
    keel::OpCounts forward, backward;
    {
      keel::OpCounter counter;
      y = attn.forward(x, rope);
      forward = counter.counts();
    }
    auto dy = torch::ones_like(y);
    {
      keel::OpCounter counter;
      y.backward(dy);
      backward = counter.counts();
    }
    EXPECT_EQ(gemms(forward), 2) << "bias " << bias;   // [q | k | v] and the output projection
    EXPECT_EQ(gemms(backward), 4) << "bias " << bias;  // input and weight gradient of each
    // The parameters stay separate and each gets its own gradient.
    for (const auto* w : {&attn.wq, &attn.wk, &attn.wv}) {
      ASSERT_TRUE(w->grad().defined());
      EXPECT_GT(w->grad().abs().sum().item<double>(), 0);
    }
  }
}

TEST(AttentionKernels, FusedLinearEqualsSeparateLinearsWithGradients) {
  torch::manual_seed(11);
  auto x = torch::randn({3, 5, 8}, torch::kFloat64);
  std::vector<keel::LinearPart> parts;
  for (int64_t out : {8, 4, 4}) {
    keel::LinearPart p;
    p.w = torch::randn({out, 8}, torch::kFloat64).requires_grad_(true);
    p.b = torch::randn({out}, torch::kFloat64).requires_grad_(true);
    p.sigma = keel::SigmaReparam(out, 8);
    keel::init_sigma_reparam(*p.sigma, static_cast<uint64_t>(out));
    p.sigma->to(torch::kFloat64);
    parts.push_back(p);
  }
  auto fused = keel::fused_linear(x, parts);
  std::vector<torch::Tensor> separate;
  for (const auto& p : parts) separate.push_back(keel::reparam_linear(x, p.w, p.b, p.sigma));
  auto dy = torch::randn_like(fused);
  auto grads_of = [&](const torch::Tensor& y) {
    std::vector<torch::Tensor> g;
    for (const auto& p : parts) g.push_back(p.w), g.push_back(p.b);
    return torch::autograd::grad({y}, g, {dy}, /*retain_graph=*/true);
  };
  auto a = grads_of(fused), b = grads_of(torch::cat(separate, -1));
  EXPECT_TRUE(torch::allclose(fused, torch::cat(separate, -1), 1e-12, 1e-12));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-12, 1e-12)) << i;
}

TEST(AttentionKernels, SublayerInputIsCastOnceUnderAutocast) {
  auto cfg = tiny_config();
  cfg.d_ff = 64;
  auto model = make_model(cfg, 5, torch::kFloat32);
  auto x = torch::randn({2, 6, cfg.d_model});
  auto rope = keel::make_rope_tables(cfg.max_seq_len, cfg.head_dim(), cfg.rope_theta, torch::kCPU);
  // ATen's own bf16 GEMMs: on a CPU without bf16 hardware keel emulates them
  // by default, and the emulation's fp32 round trips are copies of the same
  // shape (tests/train/test_cpu_bf16.cpp checks that path).
  keel::set_cpu_bf16_gemm_emulated(false);
  keel::AutocastScope autocast(true, torch::kCPU);
  keel::OpCounts counts;
  {
    keel::OpCounter counter(/*record_shapes=*/true);
    block(model, 0)->attn->forward(x, rope);
    block(model, 0)->mlp->forward(x);
    counts = counter.counts();
  }
  // Copies into a [B, T, d_model] tensor are casts of an input (q/k/v and
  // gate/up would each cast it without the sublayer's own cast).
  int64_t input_casts = 0;
  for (const auto& [name, sizes] : counts.events)
    if (name == "aten::copy_" && sizes == std::vector<int64_t>{2, 6, cfg.d_model}) ++input_casts;
  keel::reset_cpu_bf16_gemm_emulated();
  EXPECT_EQ(input_casts, 2);
}

TEST(AttentionKernels, CompositeRopeIsFourKernelsEachWay) {
  keel::CompositeOnly composite;  // the path CUDA runs
  auto tables = keel::make_rope_tables(8, 16, 10000.0, torch::kCPU);
  auto x = torch::randn({2, 6, 3, 16}).requires_grad_(true);
  torch::Tensor y;
  keel::OpCounts forward, backward;
  {
    keel::OpCounter counter;
    y = keel::apply_rope(x, tables);
    forward = counter.counts();
  }
  auto dy = torch::randn_like(y);
  {
    keel::OpCounter counter;
    y.backward(dy);
    backward = counter.counts();
  }
  EXPECT_LE(forward.kernels, 4);   // mul, roll, mul, add (was neg, cat, mul, mul, add)
  std::string seen;
  for (const auto& [name, n] : backward.by_name) seen += name + " " + std::to_string(n) + "; ";
  EXPECT_LE(backward.kernels, 4) << seen;  // two muls, the roll back, one add (was nine, with zero-filled slices)
  // The same values as the rotate-half formula, bit for bit.
  const int64_t h = 8;
  auto cos = tables.cos.narrow(0, 0, 6).view({1, 6, 1, 16}), sin = tables.sin.narrow(0, 0, 6).view({1, 6, 1, 16});
  auto xd = x.detach();
  auto expected = xd * cos + torch::cat({-xd.narrow(-1, h, h), xd.narrow(-1, 0, h)}, -1) * sin;
  EXPECT_TRUE(torch::equal(y.detach(), expected));
}

}  // namespace
