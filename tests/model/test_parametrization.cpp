// µP and CompleteP (model/parametrization.h): with the base equal to the model
// they are the standard model bit for bit (weights, logits, one optimizer
// step, AdamW and Muon); otherwise each parameter's init std, LR and decay
// multipliers follow its fan-in ratio, and the forward multipliers (logits,
// attention scale, residual branches) are the papers'. The per-parameter rules
// are also held to Microsoft's `mup` package (tests/python/test_mup_parity.py).
#include "model/parametrization.h"

#include "optim/optimizer.h"
#include "test_model_reference.h"
#include "train/training_setup.h"

using namespace keel_model_test;
using keel::Parametrization;

namespace {

keel::Config tiny_run(Parametrization p) {
  keel::Config c;
  c.model = tiny_config();
  c.model.parametrization = p;
  c.train.lr = 1e-2;
  c.train.weight_decay = 0.1;
  return c;
}

// Every parameter of `a` equals the same-named one of `b` exactly.
void expect_same_params(keel::Transformer& a, keel::Transformer& b, const std::string& what) {
  auto pb = b->named_parameters(true);
  for (auto& item : a->named_parameters(true))
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << what << ": " << item.key();
}

// Two optimizer steps on the loss of a fixed batch.
void train_two_steps(keel::Transformer& model, const keel::Config& cfg) {
  auto opt = keel::make_model_optimizer(model, cfg);
  auto idx = torch::arange(2 * 12).reshape({2, 12}) % cfg.model.vocab_size;
  for (int s = 0; s < 2; ++s) {
    opt->zero_grad();
    auto logits = model->forward(idx);
    keel::language_model_loss(logits.narrow(1, 0, 11), idx.narrow(1, 1, 11), 0.0).total.backward();
    opt->step(cfg.train.lr);
  }
}

const keel::ParamScaling& find(const std::vector<keel::ParamScaling>& all, const std::string& name) {
  for (const auto& p : all)
    if (p.name == name) return p;
  ADD_FAILURE() << "no parameter " << name;
  return all.front();
}

}  // namespace

TEST(Parametrization, BaseEqualToModelIsTheStandardModelBitForBit) {
  for (const auto optimizer : {keel::OptimizerKind::adamw, keel::OptimizerKind::muon}) {
    keel::Config standard = tiny_run(Parametrization::standard);
    standard.train.optimizer = optimizer;
    for (const auto p : {Parametrization::mup, Parametrization::completep}) {
      keel::Config mup = standard;
      mup.model.parametrization = p;
      mup.model.mup.base_width = standard.model.d_model;  // explicit base = the model itself
      if (p == Parametrization::completep) mup.model.mup.base_depth = standard.model.n_layers;
      keel::validate(mup);
      const std::string what = keel::name_of(p) + " with " + keel::name_of(optimizer);
      auto a = keel::build_model(standard.model, 7), b = keel::build_model(mup.model, 7);
      expect_same_params(a, b, what + " init");
      auto idx = torch::arange(12).reshape({1, 12}) % standard.model.vocab_size;
      EXPECT_TRUE(torch::equal(a->forward(idx), b->forward(idx))) << what;
      train_two_steps(a, standard);
      train_two_steps(b, mup);
      expect_same_params(a, b, what + " after two steps");
      for (const auto& s : keel::param_scalings(mup.model, mup.train)) {
        EXPECT_EQ(s.role, keel::WidthRole::fixed) << s.name;
        EXPECT_EQ(s.lr_mult, 1.0) << s.name;
        EXPECT_EQ(s.wd_mult, 1.0) << s.name;
      }
    }
  }
}

TEST(Parametrization, MupRulesFollowEachParametersFanInRatio) {
  keel::Config c = tiny_run(Parametrization::mup);
  c.model.d_model = 128;
  c.model.d_ff = 192;  // base d_ff = 192 * 32/128 = 48
  c.model.mup.base_width = 32;
  keel::validate(c);
  const auto all = keel::param_scalings(c.model, c.train);
  const double std = c.model.init.std, out_std = std / std::sqrt(2.0 * c.model.n_layers);
  const auto& wq = find(all, "blocks.0.attn.wq");
  EXPECT_EQ(wq.role, keel::WidthRole::matrix);
  EXPECT_EQ(wq.base_shape, (std::vector<int64_t>{32, 32}));
  EXPECT_DOUBLE_EQ(wq.fan_in_ratio, 4.0);
  EXPECT_DOUBLE_EQ(wq.init_std, std / 2.0);
  EXPECT_DOUBLE_EQ(wq.lr_mult, 0.25);
  EXPECT_DOUBLE_EQ(wq.wd_mult, 4.0);
  const auto& down = find(all, "blocks.1.mlp.w_down");
  EXPECT_DOUBLE_EQ(down.fan_in_ratio, 4.0);  // 192 / 48
  EXPECT_DOUBLE_EQ(down.init_std, out_std / 2.0);
  for (const char* name : {"wte", "lm_head", "blocks.0.attn_norm.weight", "final_norm.weight"}) {
    const auto& v = find(all, name);
    EXPECT_EQ(v.role, keel::WidthRole::vector) << name;
    EXPECT_EQ(v.lr_mult, 1.0) << name;
    EXPECT_EQ(v.wd_mult, 1.0) << name;
  }
  EXPECT_DOUBLE_EQ(find(all, "wte").init_std, std);

  // The init draws what the table says: sample std of each tensor within 5%.
  auto model = keel::build_model(c.model, 3);
  for (auto& item : model->named_parameters(true)) {
    const auto& s = find(all, item.key());
    if (s.init_std == 0.0) continue;
    const double measured = item.value().std().item<double>();
    EXPECT_NEAR(measured, s.init_std, 0.05 * s.init_std) << item.key();
  }

  // Forward multipliers: logits x 1/4; head_dim 32 against the base's 8.
  const auto f = keel::forward_scaling(c.model);
  EXPECT_DOUBLE_EQ(f.output_mult, 0.25);
  ASSERT_TRUE(f.attn_scale.has_value());
  EXPECT_DOUBLE_EQ(*f.attn_scale, std::sqrt(8.0) / 32.0);
  EXPECT_DOUBLE_EQ(model->blocks[0]->as<keel::BlockImpl>()->attn->score_scale(), std::sqrt(8.0) / 32.0);
  EXPECT_EQ(f.residual_mult, 1.0);
  EXPECT_EQ(f.adam_eps_mult, 1.0);
  // The same weights in a standard model whose attention scale is set to
  // µP's (query_pre_attn_scalar = (32/sqrt 8)^2 = 128): µP's logits are its
  // logits x 1/4, so nothing but the readout multiplier differs.
  keel::ModelConfig sp = c.model;
  sp.parametrization = Parametrization::standard;
  sp.mup = keel::MupConfig{};
  sp.query_pre_attn_scalar = 128.0;
  keel::Transformer plain(sp);
  {
    torch::NoGradGuard g;
    auto from = model->named_parameters(true);
    for (auto& item : plain->named_parameters(true)) item.value().copy_(from[item.key()]);
  }
  model->to(torch::kFloat64);
  plain->to(torch::kFloat64);
  EXPECT_DOUBLE_EQ(model->output_mult(), 0.25);
  auto idx = torch::arange(10).reshape({1, 10});
  auto ours = model->forward(idx).narrow(-1, 0, 50), theirs = plain->forward(idx).narrow(-1, 0, 50);
  EXPECT_TRUE(torch::allclose(ours, 0.25 * theirs, 1e-12, 1e-12));
  EXPECT_GT(theirs.abs().max().item<double>(), 1e-3);
}

TEST(Parametrization, FixedHeadDimKeepsTheStandardAttentionScale) {
  keel::Config c = tiny_run(Parametrization::mup);
  c.model.d_model = 64;
  c.model.n_heads = 8;
  c.model.n_kv_heads = 4;
  c.model.d_ff = 96;
  c.model.mup.base_width = 32;
  c.model.mup.base_head_dim = 8;  // the base has 4 heads of 8, this model 8 heads of 8
  keel::validate(c);
  EXPECT_FALSE(keel::forward_scaling(c.model).attn_scale.has_value());
  const auto all = keel::param_scalings(c.model, c.train);
  EXPECT_EQ(find(all, "blocks.0.attn.wk").base_shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(find(all, "blocks.0.attn.wk").role, keel::WidthRole::matrix);
}

TEST(Parametrization, MuonHiddenMatricesFollowTheSpectralCondition) {
  keel::Config c = tiny_run(Parametrization::mup);
  c.model.d_model = 128;
  c.model.d_ff = 192;
  c.model.mup.base_width = 32;
  c.train.optimizer = keel::OptimizerKind::muon;
  const auto rms = keel::param_scalings(c.model, c.train);
  EXPECT_TRUE(find(rms, "blocks.0.attn.wq").muon);
  EXPECT_DOUBLE_EQ(find(rms, "blocks.0.attn.wq").lr_mult, 0.5);  // sqrt(32/128) against 0.2*sqrt(max(m, n))
  EXPECT_DOUBLE_EQ(find(rms, "blocks.0.attn.wq").wd_mult, 2.0);
  EXPECT_FALSE(find(rms, "lm_head").muon);
  EXPECT_EQ(find(rms, "lm_head").lr_mult, 1.0);
  c.train.muon.adjust_lr = keel::MuonAdjustLr::spectral;
  const auto spectral = keel::param_scalings(c.model, c.train);
  EXPECT_EQ(find(spectral, "blocks.0.attn.wq").lr_mult, 1.0);
  EXPECT_DOUBLE_EQ(find(spectral, "blocks.0.attn.wq").init_std, c.model.init.std / 2.0);
}

TEST(Parametrization, CompletePScalesBranchesLrAndEpsWithDepth) {
  keel::Config c = tiny_run(Parametrization::completep);
  c.model.n_layers = 8;
  c.model.d_model = 64;
  c.model.d_ff = 96;
  c.model.mup.base_width = 32;
  c.model.mup.base_depth = 2;
  for (const double alpha : {1.0, 0.5}) {
    c.model.mup.depth_alpha = alpha;
    keel::validate(c);
    const auto f = keel::forward_scaling(c.model);
    EXPECT_DOUBLE_EQ(f.residual_mult, std::pow(4.0, -alpha));
    EXPECT_DOUBLE_EQ(f.depth_lr_mult, std::pow(4.0, alpha - 1.0));
    EXPECT_DOUBLE_EQ(f.adam_eps_mult, 0.5 * std::pow(4.0, -alpha));
    const auto all = keel::param_scalings(c.model, c.train);
    // Hidden matrices: width ÷2 times depth; in-block gains: depth only; outside the blocks: 1.
    EXPECT_DOUBLE_EQ(find(all, "blocks.7.attn.wq").lr_mult, 0.5 * std::pow(4.0, alpha - 1.0));
    EXPECT_DOUBLE_EQ(find(all, "blocks.7.mlp_norm.weight").lr_mult, std::pow(4.0, alpha - 1.0));
    EXPECT_EQ(find(all, "wte").lr_mult, 1.0);
    EXPECT_EQ(find(all, "final_norm.weight").lr_mult, 1.0);
    // The GPT-2 output init is taken at the base depth: the branch multiplier does the depth scaling.
    EXPECT_DOUBLE_EQ(find(all, "blocks.7.attn.wo").init_std, c.model.init.std / std::sqrt(2.0 * 2) / std::sqrt(2.0));
    auto model = keel::build_model(c.model, 1);
    EXPECT_DOUBLE_EQ(model->blocks[3]->as<keel::BlockImpl>()->residual_mult, std::pow(4.0, -alpha));
  }
}

TEST(Parametrization, BranchMultiplierScalesWhatEachLayoutAdds) {
  // A pre-layout block with residual_mult r computes x + r f(...): against
  // the same block at r = 1, (out_r - x) = r (out_1 - x) for the attention
  // branch alone, which a one-layer model with a zero MLP shows.
  for (const auto placement : {NormPlacement::pre, NormPlacement::reordered, NormPlacement::sandwich}) {
    keel::ModelConfig m = tiny_config();
    m.n_layers = 1;
    m.norm_placement = placement;
    keel::Transformer model = make_model(m, 5, torch::kFloat32);
    auto* block = model->blocks[0]->as<keel::BlockImpl>();
    {
      torch::NoGradGuard g;
      block->mlp->w_down.zero_();
    }
    auto x = torch::randn({1, 6, m.d_model});
    const auto rope = keel::make_rope_tables(16, m.head_dim(), m.rope_theta, torch::kCPU);
    auto full = block->forward(x, rope, nullptr) - x;
    block->residual_mult = 0.25;
    auto scaled = block->forward(x, rope, nullptr) - x;
    EXPECT_TRUE(torch::allclose(scaled, 0.25 * full, 1e-5, 1e-6)) << keel::name_of(placement);
    EXPECT_GT(full.abs().max().item<double>(), 1e-3);
  }
}

TEST(Parametrization, AdamWGroupMultipliersEqualAScaledLrAndDecay) {
  // A parameter with lr_mult 0.25, wd_mult 4 takes exactly the step a plain
  // AdamW takes at LR/4 and decay x4, on the fused and the reference path.
  for (const auto impl : {keel::OptimizerImpl::fused, keel::OptimizerImpl::reference}) {
    keel::TrainConfig t;
    t.optimizer_impl = impl;
    t.weight_decay = 0.1;
    auto w0 = torch::randn({8, 8});
    auto g = torch::randn({8, 8});
    auto a = w0.clone().requires_grad_(true), b = w0.clone().requires_grad_(true);
    keel::AdamW scaled({{"blocks.0.attn.wq", a, 0.25, 4.0}}, t);
    keel::TrainConfig plain_t = t;
    plain_t.weight_decay = 0.4;
    keel::AdamW plain({{"blocks.0.attn.wq", b}}, plain_t);
    for (int s = 0; s < 3; ++s) {
      a.mutable_grad() = g.clone();
      b.mutable_grad() = g.clone();
      scaled.step(1e-2);
      plain.step(1e-2 * 0.25);
    }
    EXPECT_TRUE(torch::equal(a, b)) << keel::name_of(impl);
    EXPECT_FALSE(torch::equal(a, w0));
  }
}
