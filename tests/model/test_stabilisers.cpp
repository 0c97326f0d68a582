// The other attention-logit stabilisers (issue 11): QKV-norm, hard logit
// clamping, sigmaReparam and grouped QK-Norm each equal the fp64 reference
// forward (test_model_reference.h); grouped scope reduces to head and
// projection scope at its ends; the clamp bounds what it promises; the power
// iteration finds the largest singular value; QK-clip brings every head's
// logit to at most tau and leaves the others alone.
#include "test_model_reference.h"

#include "model/sigma_reparam.h"
#include "optim/optimizer.h"
#include "optim/qk_clip.h"

using namespace keel_model_test;

namespace {

// tol: relative; the explicit attention path (softcap, clamp) computes its
// scores and softmax in fp32 even in an fp64 model.
void expect_matches_reference(const keel::ModelConfig& cfg, const std::string& what, double tol = 1e-9) {
  auto model = make_model(cfg, 5);
  perturb(model);
  auto idx = random_tokens(cfg, 2, 12);
  torch::NoGradGuard no_grad;
  auto got = model->forward(idx);
  auto want = ref_forward(model, idx);
  EXPECT_LT(max_abs_diff(got, want), tol * std::max(1.0, max_abs(want))) << what;
}

keel::Transformer copy_params(keel::Transformer& src, const keel::ModelConfig& cfg) {
  auto m = make_model(cfg, 99);
  auto p = src->named_parameters(true);
  auto b = src->named_buffers(true);
  torch::NoGradGuard no_grad;
  for (auto& item : m->named_parameters(true)) item.value().copy_(p[item.key()]);
  for (auto& item : m->named_buffers(true)) item.value().copy_(b[item.key()]);
  return m;
}

// One training step against the same step written out by hand: the model's
// loss and backward against autograd through the reference forward with a
// hand-written cross-entropy, then keel's AdamW against the first AdamW update
// from its formula (m = (1-b1) g, v = (1-b2) g^2, bias-corrected, decoupled
// decay on the decay group). `tol` is relative, as in expect_matches_reference.
void expect_step_matches_reference(const keel::ModelConfig& cfg, const std::string& what, double tol = 1e-9) {
  SCOPED_TRACE(what);
  auto model = make_model(cfg, 5);
  perturb(model);
  auto ref = copy_params(model, cfg);
  auto idx = random_tokens(cfg, 2, 12), targets = random_tokens(cfg, 2, 12, 11);
  keel::TrainConfig t;
  t.lr = 1e-2;
  t.weight_decay = 0.1;
  t.beta1 = 0.9;
  t.beta2 = 0.95;
  t.eps = 1e-8;
  std::vector<keel::NamedParam> params;
  for (auto& item : model->named_parameters(true)) params.push_back({item.key(), item.value()});
  keel::AdamW opt(params, t);
  keel::language_model_loss(model->forward(idx), targets, 0.0).ce.backward();

  auto logits = ref_forward(ref, idx, nullptr, /*with_grad=*/true);
  auto logp = torch::log_softmax(logits.reshape({-1, logits.size(-1)}), -1);
  auto ref_ce = -logp.gather(1, targets.reshape({-1, 1})).mean();
  ref_ce.backward();

  auto ref_params = ref->named_parameters(true);
  for (const auto& p : params) {
    const auto& g = p.param.grad();
    const auto& rg = ref_params[p.name].grad();
    ASSERT_TRUE(g.defined() && rg.defined()) << p.name << ": no gradient";
    EXPECT_LE(max_abs_diff(g, rg), tol * std::max(1e-3, max_abs(rg))) << "gradient of " << p.name;
  }
  opt.step(t.lr);
  torch::NoGradGuard no_grad;
  for (const auto& p : params) {
    auto w = ref_params[p.name];
    // keel's own gradient (checked against the reference's above): g / (|g| +
    // eps) turns a 1e-10 rounding difference in a gradient that is ~0 (a
    // clipped-softmax weight at exactly 0) into ~1% of lr, so the reference's
    // gradient would test the rounding of the backward, not AdamW.
    auto g = p.param.grad().to(w.scalar_type());
    const double decay = keel::wants_weight_decay(p.name, t) ? t.weight_decay : 0.0;
    auto m = (1 - t.beta1) * g, v = (1 - t.beta2) * g * g;
    auto m_hat = m / (1 - t.beta1), v_hat = v / (1 - t.beta2);
    auto want = w * (1 - t.lr * decay) - t.lr * m_hat / (v_hat.sqrt() + t.eps);
    // An update is ~lr in size whatever the gradient: compare against lr.
    EXPECT_LE(max_abs_diff(p.param, want), std::max(1e-12, tol * 1e3) * t.lr) << "after AdamW: " << p.name;
  }
}

keel::ModelConfig gqa_config() {
  auto cfg = tiny_config();
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  return cfg;
}

}  // namespace

TEST(Stabilisers, QkvNormEqualsReference) {
  for (const char* kind : {"rms", "layernorm"}) {
    auto cfg = gqa_config();
    cfg.qkv_norm = as<NormKind>(kind);
    cfg.bias = std::string(kind) == "layernorm";
    expect_matches_reference(cfg, std::string("qkv_norm ") + kind);
    // The block has no pre-attention norm: QKV-norm replaces it.
    EXPECT_FALSE(block(make_model(cfg), 0)->attn_norm);
  }
}

TEST(Stabilisers, LogitClampEqualsReferenceAndBoundsScores) {
  auto cfg = gqa_config();
  cfg.attn_logit_clamp = 0.5;
  expect_matches_reference(cfg, "clamp 0.5", 1e-5);
  cfg.attn_softcap = 2.0;  // composes with the softcap: cap, then clamp
  expect_matches_reference(cfg, "softcap 2 + clamp 0.5", 1e-5);

  auto model = make_model(cfg, 5);
  {  // make raw scores large, then check the clamped ones
    torch::NoGradGuard no_grad;
    for (size_t l = 0; l < model->blocks->size(); ++l) block(model, l)->attn->wq.mul_(30.0);
  }
  std::vector<keel::AttentionStats> st;
  keel::ForwardOptions o;
  o.attention_stats = &st;
  torch::NoGradGuard no_grad;
  model->forward(random_tokens(cfg, 2, 12), o);
  EXPECT_GT(st[0].max_score.item<double>(), 0.5);
  EXPECT_LE(st[0].max_score_capped.item<double>(), 0.5 + 1e-12);
}

TEST(Stabilisers, SigmaReparamEqualsReference) {
  for (const char* mlp : {"swiglu", "gelu"}) {
    auto cfg = gqa_config();
    cfg.sigma_reparam = true;
    cfg.mlp = as<MlpKind>(mlp);
    expect_matches_reference(cfg, std::string("sigma_reparam ") + mlp);
  }
}

TEST(Stabilisers, SigmaReparamGammaLearnsAndVectorsAreBuffers) {
  auto cfg = gqa_config();
  cfg.sigma_reparam = true;
  auto model = make_model(cfg, 5, torch::kFloat32);
  auto params = model->named_parameters(true);
  auto buffers = model->named_buffers(true);
  ASSERT_TRUE(params.contains("blocks.0.attn.wq_sigma.gamma"));
  EXPECT_TRUE(buffers.contains("blocks.0.attn.wq_sigma.u"));  // saved with the weights, not trained
  EXPECT_TRUE(buffers.contains("blocks.1.mlp.w_down_sigma.v"));
  EXPECT_DOUBLE_EQ(params["blocks.0.attn.wq_sigma.gamma"].item<double>(), 1.0);
  EXPECT_NEAR(buffers["blocks.0.attn.wq_sigma.u"].norm().item<double>(), 1.0, 1e-6);
  auto idx = random_tokens(cfg, 2, 12);
  auto loss = model->forward(idx).narrow(-1, 0, cfg.vocab_size).logsumexp(-1).mean();
  loss.backward();
  EXPECT_GT(params["blocks.0.attn.wq_sigma.gamma"].grad().abs().item<double>(), 0.0);
  // The same seed with sigma_reparam off gives the same weights.
  auto off = gqa_config();
  auto plain = make_model(off, 5, torch::kFloat32);
  EXPECT_TRUE(torch::equal(plain->named_parameters(true)["blocks.0.attn.wq"], params["blocks.0.attn.wq"]));
}

TEST(Stabilisers, PowerIterationFindsTheLargestSingularValue) {
  // W = Q1 diag(5, 3, 1, 0.5) Q2^T with random orthogonal Q1 (6x4) and Q2 (4x4).
  torch::manual_seed(0);
  auto q1 = std::get<0>(torch::linalg_qr(torch::randn({6, 4})));
  auto q2 = std::get<0>(torch::linalg_qr(torch::randn({4, 4})));
  auto w = torch::matmul(torch::matmul(q1, torch::diag(torch::tensor({5.0f, 3.0f, 1.0f, 0.5f}))), q2.t());
  keel::SigmaReparam s(6, 4);
  keel::init_sigma_reparam(*s, 42);
  const double first = s->sigma(w).item<double>();
  for (int i = 0; i < 40; ++i) s->power_step(w);
  EXPECT_NEAR(s->sigma(w).item<double>(), 5.0, 1e-4) << "started at " << first;
  // scale() = gamma / sigma: the reparametrised weight has spectral norm gamma.
  torch::NoGradGuard no_grad;
  s->gamma.fill_(2.0);
  auto top = torch::linalg_matrix_norm(w * s->scale(w), 2).item<double>();
  EXPECT_NEAR(top, 2.0, 1e-3);
}

// Issue 11's "forward and one AdamW step" for every model-side variant
// (QK-clip acts after the optimizer and has its own test below).
TEST(Stabilisers, OneTrainingStepEqualsHandWrittenReference) {
  for (const char* kind : {"rms", "layernorm"}) {  // QKV-norm
    auto cfg = gqa_config();
    cfg.qkv_norm = as<NormKind>(kind);
    cfg.bias = std::string(kind) == "layernorm";
    expect_step_matches_reference(cfg, std::string("qkv_norm ") + kind);
  }
  {  // QK_FC_norm: QK-Norm plus norms after the attention and MLP outputs
    auto cfg = gqa_config();
    cfg.norm_placement = NormPlacement::sandwich;
    cfg.qk_norm.type = NormKind::rms;
    expect_step_matches_reference(cfg, "qk_fc_norm");
  }
  {  // hard clamp (explicit fp32 scores, hence the looser tolerance)
    auto cfg = gqa_config();
    cfg.attn_logit_clamp = 0.5;
    expect_step_matches_reference(cfg, "clamp 0.5", 1e-5);
  }
  {
    auto cfg = gqa_config();
    cfg.sigma_reparam = true;
    expect_step_matches_reference(cfg, "sigma_reparam");
  }
  {  // grouped QK-Norm, 2 groups of 2 query heads
    auto cfg = gqa_config();
    cfg.qk_norm.type = NormKind::rms;
    cfg.qk_norm.scope = QKNormScope::group;
    cfg.qk_norm.groups = 2;
    expect_step_matches_reference(cfg, "qk_norm group");
  }
}

// Rybakov et al. 2024's comparison variants (issue 51): soft temperature,
// soft clip (clipped softmax) and LayerScale, each against the hand-written
// fp64 reference, forward and one training step.
TEST(Stabilisers, SoftTemperatureEqualsReference) {
  auto cfg = gqa_config();
  cfg.attn_temperature = 0.5;
  expect_matches_reference(cfg, "soft temperature 0.5");
  expect_step_matches_reference(cfg, "soft temperature 0.5");
  cfg.attn_temperature_learnable = true;  // beta per head, perturbed away from 0.5 by the reference's perturb()
  expect_matches_reference(cfg, "learned soft temperature");
  expect_step_matches_reference(cfg, "learned soft temperature");
  auto model = make_model(cfg, 5);
  const auto& beta = block(model, 0)->attn->softmax_beta;
  ASSERT_TRUE(beta.defined());
  EXPECT_EQ(beta.numel(), cfg.n_heads);
  EXPECT_TRUE(torch::allclose(beta, torch::full_like(beta, 0.5))) << "starts at model.attn_temperature";
  EXPECT_FALSE(keel::wants_weight_decay("blocks.0.attn.softmax_beta", keel::TrainConfig{}));
  // Halving the scores is what the fixed beta does: the same as a query_pre_attn_scalar 4x the head_dim.
  auto half = gqa_config();
  half.attn_temperature = 0.5;
  auto quarter_scale = gqa_config();
  quarter_scale.query_pre_attn_scalar = 4.0 * static_cast<double>(half.head_dim());
  auto a = make_model(half, 5), b = make_model(quarter_scale, 5);
  auto idx = random_tokens(half, 2, 12);
  torch::NoGradGuard no_grad;
  EXPECT_LT(max_abs_diff(a->forward(idx), b->forward(idx)), 1e-12);
}

TEST(Stabilisers, ClippedSoftmaxEqualsReferenceAndZeroesSmallWeights) {
  auto cfg = gqa_config();
  cfg.clipped_softmax = true;
  expect_matches_reference(cfg, "clipped softmax", 1e-5);
  expect_step_matches_reference(cfg, "clipped softmax", 1e-5);
  cfg.clipped_softmax_gamma = -0.2;  // a wider stretch, so many weights clip to exactly 0
  cfg.clipped_softmax_zeta = 1.2;
  expect_matches_reference(cfg, "clipped softmax, gamma -0.2, zeta 1.2", 1e-5);
  auto model = make_model(cfg, 5);
  EXPECT_EQ(block(model, 0)->attn->kernel_name(2, 12, torch::kCPU, torch::kFloat64), "explicit (clipped softmax)");
  // The reference's probabilities: some exactly 0 among the allowed keys, rows no longer summing to 1.
  std::vector<RefAttentionTrace> traces;
  auto idx = random_tokens(cfg, 2, 12);
  perturb(model);
  ref_forward(model, idx, &traces);
  auto p = traces[0].probs[0];
  auto allowed = torch::ones({12, 12}, torch::kBool).tril();
  EXPECT_GT(p.masked_select(allowed.expand_as(p)).eq(0).sum().item<int64_t>(), 0);
  EXPECT_GT((p.sum(-1) - 1).abs().max().item<double>(), 1e-3);
  // Without the clip the model differs: the option is not a no-op.
  auto plain = cfg;
  plain.clipped_softmax = false;
  plain.clipped_softmax_gamma = -0.03;
  plain.clipped_softmax_zeta = 1.03;
  auto unclipped = make_model(plain, 5);
  perturb(unclipped);
  torch::NoGradGuard no_grad;
  EXPECT_GT(max_abs_diff(model->forward(idx), unclipped->forward(idx)), 1e-3);
}

TEST(Stabilisers, LayerScaleEqualsReferenceInEveryLayout) {
  for (const char* layout : {"pre", "post", "reordered", "sandwich"}) {
    auto cfg = gqa_config();
    cfg.norm_placement = as<NormPlacement>(layout);
    cfg.layer_scale = 0.1;
    expect_matches_reference(cfg, std::string("layer_scale ") + layout);
    expect_step_matches_reference(cfg, std::string("layer_scale ") + layout);
  }
  auto cfg = gqa_config();
  cfg.layer_scale = 1e-5;
  auto model = make_model(cfg, 5);
  for (const auto* g : {&block(model, 0)->attn_layer_scale, &block(model, 1)->mlp_layer_scale}) {
    ASSERT_TRUE(g->defined());
    EXPECT_EQ(g->numel(), cfg.d_model);
    EXPECT_TRUE(torch::allclose(*g, torch::full_like(*g, 1e-5))) << "every gain starts at model.layer_scale";
  }
  EXPECT_FALSE(keel::wants_weight_decay("blocks.0.attn_layer_scale", keel::TrainConfig{}));
  EXPECT_FALSE(keel::wants_weight_decay("blocks.0.mlp_layer_scale", keel::TrainConfig{}));
  // At 1e-5 the blocks barely move the stream: the logits are those of the embedding through the final norm.
  auto idx = random_tokens(cfg, 2, 12);
  torch::NoGradGuard no_grad;
  auto x = model->wte.index_select(0, idx.reshape({-1})).view({2, 12, cfg.d_model});
  auto direct = model->head_logits(model->final_norm->forward(x));
  EXPECT_LT(max_abs_diff(model->forward(idx), direct), 1e-3 * std::max(1.0, max_abs(direct)));
}

TEST(Stabilisers, GroupedQkNormEndsEqualHeadAndProjectionScope) {
  for (const char* type : {"rms", "layernorm"}) {
    auto base = gqa_config();
    base.qk_norm.type = as<NormKind>(type);
    // One group = the whole projection (OLMo 2).
    auto group = base, proj = base;
    group.qk_norm.scope = QKNormScope::group;
    group.qk_norm.groups = 1;
    proj.qk_norm.scope = QKNormScope::projection;
    auto g_model = make_model(group, 5);
    perturb(g_model);
    auto p_model = copy_params(g_model, proj);
    auto idx = random_tokens(base, 2, 12);
    torch::NoGradGuard no_grad;
    EXPECT_LT(max_abs_diff(g_model->forward(idx), p_model->forward(idx)), 1e-12) << type << ", 1 group";
    // n_heads groups = head scope (Qwen3), shared and per-head gains.
    for (bool per_head : {false, true}) {
      auto g2 = base, head = base;
      g2.qk_norm.scope = QKNormScope::group;
      g2.qk_norm.groups = base.n_heads;
      g2.qk_norm.gain_per_head = head.qk_norm.gain_per_head = per_head;
      head.qk_norm.scope = QKNormScope::head;
      auto gm = make_model(g2, 5);
      perturb(gm);
      auto hm = copy_params(gm, head);
      EXPECT_LT(max_abs_diff(gm->forward(idx), hm->forward(idx)), 1e-12) << type << ", n_heads groups";
    }
    // In between (2 groups of 2 query heads; keys 2 groups of 1): the reference.
    auto mid = base;
    mid.qk_norm.scope = QKNormScope::group;
    mid.qk_norm.groups = 2;
    expect_matches_reference(mid, std::string(type) + ", 2 groups");
  }
}

TEST(Stabilisers, QkClipBringsEveryHeadToTau) {
  auto cfg = gqa_config();  // 4 query heads on 2 key heads
  cfg.bias = true;
  auto model = make_model(cfg, 5, torch::kFloat32);
  perturb(model);
  auto& attn = *block(model, 0)->attn;
  {  // heads 0 and 3 get large logits, heads 1 and 2 stay small
    torch::NoGradGuard no_grad;
    const int64_t D = cfg.d_model / cfg.n_heads;
    attn.wq.narrow(0, 0, D).mul_(40.0);
    attn.wq.narrow(0, 3 * D, D).mul_(25.0);
  }
  attn.track_head_max = true;
  auto idx = random_tokens(cfg, 2, 12);
  model->forward(idx);  // grad mode on: a training forward records the maxima
  auto before = attn.head_max.clone();
  const double tau = before.index({torch::tensor({1, 2})}).max().item<double>() * 1.5;
  ASSERT_GT(before[0].item<double>(), tau);
  ASSERT_GT(before[3].item<double>(), tau);
  auto gamma = keel::qk_clip_(attn.wq, attn.bq, attn.wk, attn.bk, before, tau, cfg.n_heads, cfg.n_kv_heads);
  EXPECT_EQ(gamma[1].item<float>(), 1.0f);
  attn.head_max = torch::Tensor();
  model->forward(idx);
  auto after = attn.head_max;
  for (int64_t h = 0; h < cfg.n_heads; ++h) {
    const double b = before[h].item<double>(), a = after[h].item<double>();
    if (b > tau)
      EXPECT_NEAR(a, tau, 1e-4 * tau) << "head " << h;  // exactly tau: logits scale by tau / max
    else
      EXPECT_NEAR(a, b, 1e-4 * b) << "head " << h << " was below tau and must not change";
  }
}
