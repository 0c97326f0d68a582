// The transformer around the blocks: embedding norms (docs/papers.md#softcaps-and-embeddings),
// rotary embeddings, the loss over the real vocabulary, and shape contracts.
#include "test_model_reference.h"

using namespace keel_model_test;

namespace {

// A model with embed_norm `variant` and a twin with embed_norm none whose
// embedding rows are the first model's post-lookup vectors, row by row: the
// twins agree iff the embedding norm is exactly row -> `transform(row)`.
void expect_embedding_equivalent(const std::string& variant,
                                 const std::function<torch::Tensor(keel::Transformer&)>& transformed_wte,
                                 bool bias = false) {
  auto cfg = tiny_config();
  cfg.bias = bias;
  cfg.embed_norm = as<EmbedNorm>(variant);
  auto model = make_model(cfg, 13);
  perturb(model, 14);
  auto plain_cfg = cfg;
  plain_cfg.embed_norm = EmbedNorm::none;
  auto plain = make_model(plain_cfg, 13);
  {
    torch::NoGradGuard no_grad;
    auto src = model->named_parameters(true);
    for (auto& item : plain->named_parameters(true)) item.value().copy_(src[item.key()]);
    plain->wte.copy_(transformed_wte(model));
  }
  auto idx = random_tokens(cfg, 2, 10);
  torch::NoGradGuard no_grad;
  auto got = model->forward(idx);
  EXPECT_TENSOR_NEAR(got, plain->forward(idx), 1e-10, 1e-12);
  EXPECT_TENSOR_NEAR(got, ref_forward(model, idx), 1e-10, 1e-12);
  // Not vacuous: differs from the model without the embedding norm.
  auto none = make_model(plain_cfg, 13);
  {
    torch::NoGradGuard g;
    auto src = model->named_parameters(true);
    for (auto& item : none->named_parameters(true)) item.value().copy_(src[item.key()]);
  }
  EXPECT_GT(max_abs_diff(got, none->forward(idx)), 1e-4);
}

// Gemma: the looked-up embedding times sqrt(d_model).
TEST(EmbedNorm, ScaleSqrtD) {
  expect_embedding_equivalent("scale_sqrt_d", [](keel::Transformer& m) { return m->wte * std::sqrt(32.0); });
}

// modded-nanogpt: parameter-free RMSNorm, so block 0 sees unit-RMS vectors.
TEST(EmbedNorm, RmsNormGivesUnitRmsRows) {
  expect_embedding_equivalent("rmsnorm", [](keel::Transformer& m) {
    auto w = m->wte;
    return w / torch::sqrt(w.pow(2).mean(-1, true) + 1e-5);  // model.norm_eps default
  });
  // Block 0's input: unit RMS per position (up to eps), whatever the embedding scale.
  auto x = torch::randn({3, 5, 32}, torch::kFloat64) * 0.02;
  auto y = keel::rms_normalize(x, 1e-12);
  auto rms = y.pow(2).mean(-1).sqrt();
  EXPECT_TENSOR_NEAR(rms, torch::ones_like(rms), 0, 1e-7);
}

// BLOOM: a LayerNorm (gain, and bias when model.bias) right after the lookup.
TEST(EmbedNorm, LayerNorm) {
  for (bool bias : {false, true}) {
    SCOPED_TRACE(bias);
    expect_embedding_equivalent(
        "layernorm",
        [bias](keel::Transformer& m) {
          auto w = m->wte;
          auto c = w - w.mean(-1, true);
          auto y = c / torch::sqrt(c.pow(2).mean(-1, true) + 1e-5) * m->embed_norm->weight;
          EXPECT_EQ(m->embed_norm->bias.defined(), bias);
          return bias ? y + m->embed_norm->bias : y;
        },
        bias);
  }
}

// cos/sin tables: angle t * theta^(-2i/d) for dimension i and i + d/2.
TEST(Rope, TablesMatchFormula) {
  const int64_t T = 20, D = 8;
  const double theta = 500.0;
  auto t = keel::make_rope_tables(T, D, theta, torch::kCPU);
  ASSERT_EQ(t.cos.sizes(), (std::vector<int64_t>{T, D}));
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < D; ++i) {
      const double angle = p * std::pow(theta, -2.0 * (i % (D / 2)) / D);
      EXPECT_NEAR(t.cos[p][i].item<double>(), std::cos(angle), 2e-6) << p << "," << i;
      EXPECT_NEAR(t.sin[p][i].item<double>(), std::sin(angle), 2e-6) << p << "," << i;
    }
}

// Rotate-half: the pair (x_i, x_{i+d/2}) is rotated by its angle; norms are kept.
TEST(Rope, RotatesPairsIAndIPlusHalf) {
  const int64_t B = 2, T = 6, Hh = 3, D = 8;
  auto tables = keel::make_rope_tables(T, D, 10000.0, torch::kCPU);
  auto x = torch::randn({B, T, Hh, D}, torch::kFloat64);
  auto y = keel::apply_rope(x, tables);
  for (int64_t p = 0; p < T; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / D);
      auto x1 = x.select(1, p).select(-1, i), x2 = x.select(1, p).select(-1, i + D / 2);
      EXPECT_TENSOR_NEAR(y.select(1, p).select(-1, i), x1 * std::cos(a) - x2 * std::sin(a), 0, 1e-5);
      EXPECT_TENSOR_NEAR(y.select(1, p).select(-1, i + D / 2), x2 * std::cos(a) + x1 * std::sin(a), 0, 1e-5);
    }
  EXPECT_TENSOR_NEAR(y.norm(2, -1), x.norm(2, -1), 1e-6, 0);
  EXPECT_TRUE(torch::allclose(y.select(1, 0), x.select(1, 0)));  // position 0: identity
}

// The point of RoPE: <rope(q, m), rope(k, n)> depends on m - n only.
TEST(Rope, DotProductDependsOnRelativePosition) {
  const int64_t T = 12, D = 16;
  auto tables = keel::make_rope_tables(T, D, 10000.0, torch::kCPU);
  auto q = torch::randn({D}, torch::kFloat64), k = torch::randn({D}, torch::kFloat64);
  auto qs = keel::apply_rope(q.expand({1, T, 1, D}).contiguous(), tables).view({T, D});
  auto ks = keel::apply_rope(k.expand({1, T, 1, D}).contiguous(), tables).view({T, D});
  auto dots = torch::matmul(qs, ks.t());  // [m, n]
  for (int64_t m = 1; m < T; ++m)
    for (int64_t n = 1; n < T; ++n)
      EXPECT_NEAR(dots[m][n].item<double>(), dots[m - 1][n - 1].item<double>(), 1e-4);
  EXPECT_GT((dots[5][0] - dots[0][0]).abs().item<double>(), 1e-3);  // but not position-blind
}

// Cross entropy over the real vocabulary plus z-loss c * mean (log Z)^2.
TEST(Loss, CrossEntropyAndZLossByHand) {
  auto cfg = tiny_config();
  auto model = make_model(cfg, 19, torch::kFloat32);
  auto idx = random_tokens(cfg, 2, 8), targets = random_tokens(cfg, 2, 8, 77);
  auto logits = model->forward(idx);
  auto real = logits.narrow(-1, 0, cfg.vocab_size).to(torch::kFloat64).reshape({-1, cfg.vocab_size});
  auto tg = targets.reshape({-1});
  double ce = 0, z = 0;
  for (int64_t i = 0; i < real.size(0); ++i) {
    const double lse = std::log(real[i].exp().sum().item<double>());
    ce += lse - real[i][tg[i].item<int64_t>()].item<double>();
    z += lse * lse;
  }
  ce /= real.size(0);
  z /= real.size(0);
  auto parts = keel::language_model_loss(logits, targets, 1e-2);
  EXPECT_NEAR(parts.ce.item<double>(), ce, 1e-5);
  EXPECT_NEAR(parts.z.item<double>(), z, 1e-4);
  EXPECT_NEAR(parts.total.item<double>(), ce + 1e-2 * z, 1e-5);
  auto no_z = keel::language_model_loss(logits, targets, 0.0);
  EXPECT_NEAR(no_z.total.item<double>(), ce, 1e-5);
  // Near-uniform init: ce close to log(vocab_size), the real one (50), not the padded one (64).
  auto small = make_model(cfg, 19, torch::kFloat32);
  {
    torch::NoGradGuard g;
    small->lm_head.mul_(1e-4);
  }
  EXPECT_NEAR(keel::language_model_loss(small->forward(idx), targets, 0).ce.item<double>(), std::log(50.0), 1e-3);
}

// Padded head rows get no gradient; everything else a finite one.
TEST(Loss, PaddedRowsGetNoGradient) {
  auto cfg = tiny_config();
  cfg.final_softcap = 10.0;
  auto model = make_model(cfg, 23, torch::kFloat32);
  auto idx = random_tokens(cfg, 2, 8), targets = random_tokens(cfg, 2, 8, 5);
  keel::language_model_loss(model->forward(idx), targets, 1e-4).total.backward();
  auto g = model->lm_head.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.narrow(0, cfg.vocab_size, 14).abs().max().item<float>(), 0.0f);
  EXPECT_GT(g.narrow(0, 0, cfg.vocab_size).abs().max().item<float>(), 0.0f);
  for (auto& item : model->named_parameters(true)) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
  }
}

// Sequences in a batch do not interact; over-long input is refused.
TEST(Transformer, BatchElementsIndependentAndLengthChecked) {
  auto cfg = tiny_config();
  auto model = make_model(cfg, 29);
  auto idx = random_tokens(cfg, 3, 10);
  torch::NoGradGuard no_grad;
  auto all = model->forward(idx);
  ASSERT_EQ(all.sizes(), (std::vector<int64_t>{3, 10, cfg.padded_vocab()}));
  for (int64_t b = 0; b < 3; ++b)
    EXPECT_TENSOR_NEAR(all[b], model->forward(idx.narrow(0, b, 1))[0], 1e-12, 1e-12);
  EXPECT_THROW(model->forward(random_tokens(cfg, 1, cfg.max_seq_len + 1)), c10::Error);
  // A shorter call after a longer one (RoPE tables are cached) still matches the prefix.
  EXPECT_TENSOR_NEAR(model->forward(idx.narrow(1, 0, 4)), all.narrow(1, 0, 4), 1e-12, 1e-12);
}

}  // namespace
