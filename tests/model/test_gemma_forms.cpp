// The two Gemma forms keel gained for Hugging Face interop (issue 10):
// model.mlp: geglu_tanh (down(gelu_tanh(gate x) * up x), Gemma's
// gelu_pytorch_tanh) and model.norm_unit_offset (every gain applied as
// 1 + w, w initialised to 0, Gemma's RMSNorm). Each equals the fp64
// reference forward of test_model_reference.h, written from the formulas.
#include "test_model_reference.h"

using namespace keel_model_test;

namespace {

keel::ModelConfig gemma_like(const std::string& placement) {
  auto cfg = tiny_config();
  cfg.norm_placement = as<NormPlacement>(placement);
  cfg.mlp = MlpKind::geglu_tanh;
  cfg.norm_unit_offset = true;
  cfg.embed_norm = EmbedNorm::scale_sqrt_d;
  return cfg;
}

// Forward of `model` equals the reference in fp64, and the explicit attention path agrees.
void expect_matches_reference(keel::Transformer& model, const keel::ModelConfig& cfg) {
  auto idx = random_tokens(cfg, 2, 9);
  torch::NoGradGuard no_grad;
  auto want = ref_forward(model, idx);
  auto got = model->forward(idx);
  EXPECT_TENSOR_NEAR(got, want, 1e-10, 1e-12);
  EXPECT_GT(want.narrow(-1, 0, cfg.vocab_size).std().item<double>(), 1e-2);
}

}  // namespace

TEST(GemmaForms, GegluTanhMatchesReference) {
  for (const char* placement : {"pre", "sandwich", "reordered"}) {
    for (bool bias : {false, true}) {
      SCOPED_TRACE(std::string(placement) + (bias ? "/bias" : ""));
      auto cfg = tiny_config();
      cfg.norm_placement = as<NormPlacement>(placement);
      cfg.mlp = MlpKind::geglu_tanh;
      cfg.bias = bias;
      auto model = make_model(cfg, 21);
      perturb(model, 22);
      expect_matches_reference(model, cfg);
    }
  }
}

// Teeth: the tanh approximation is not the erf GELU and not SiLU, so a model
// that used either instead would differ from the reference by far more than
// the tolerance above.
TEST(GemmaForms, GegluTanhIsNeitherErfGeluNorSilu) {
  auto x = torch::linspace(-4, 4, 101, torch::kFloat64);
  auto tanh_gelu = torch::gelu(x, "tanh");
  const double c = std::sqrt(2.0 / M_PI);
  auto formula = 0.5 * x * (1.0 + torch::tanh(c * (x + 0.044715 * x.pow(3))));
  EXPECT_LE((tanh_gelu - formula).abs().max().item<double>(), 1e-14);
  EXPECT_GT((tanh_gelu - torch::gelu(x)).abs().max().item<double>(), 1e-4);

  auto cfg = tiny_config();
  cfg.mlp = MlpKind::geglu_tanh;
  auto model = make_model(cfg, 23);
  perturb(model, 24);
  auto idx = random_tokens(cfg, 2, 9);
  torch::NoGradGuard no_grad;
  auto got = model->forward(idx);
  auto as_swiglu = cfg;
  as_swiglu.mlp = MlpKind::swiglu;  // the reference with the wrong activation
  keel::Transformer wrong(as_swiglu);
  for (auto& p : wrong->named_parameters(true)) p.value().set_data(model->named_parameters(true)[p.key()].clone());
  EXPECT_GT(max_abs_diff(got, ref_forward(wrong, idx)), 1e-3);
}

TEST(GemmaForms, UnitOffsetInitialisesGainsToZero) {
  auto cfg = gemma_like("sandwich");
  cfg.qk_norm.type = NormKind::rms;
  cfg.embed_norm = EmbedNorm::layernorm;
  auto m = keel::build_model(cfg, 5);
  int64_t gains = 0;
  for (auto& item : m->named_parameters(true)) {
    if (item.key().find("norm") == std::string::npos || !ends_with(item.key(), "weight")) continue;
    ++gains;
    EXPECT_TRUE(torch::equal(item.value(), torch::zeros_like(item.value()))) << item.key();
  }
  EXPECT_EQ(gains, 2 + cfg.n_layers * 6);  // embed + final, 4 block norms + q/k norms per layer
}

TEST(GemmaForms, UnitOffsetMatchesReference) {
  for (const char* placement : {"pre", "post", "reordered", "sandwich"}) {
    for (const char* qk : {"none", "rms", "layernorm"}) {
      SCOPED_TRACE(std::string(placement) + "/qk " + qk);
      auto cfg = gemma_like(placement);
      cfg.qk_norm.type = as<NormKind>(qk);
      cfg.qk_norm.scope = std::string(qk) == "layernorm" ? QKNormScope::projection : QKNormScope::head;
      auto model = make_model(cfg, 31);
      perturb(model, 32);
      expect_matches_reference(model, cfg);
    }
  }
}

// x_hat * (1 + w) is the same function as a plain gain of 1 + w: a model with
// the offset equals, to rounding, a model without it whose gains are w + 1.
// And it is not the plain form with the same stored w (teeth).
TEST(GemmaForms, UnitOffsetEqualsPlainGainPlusOne) {
  auto cfg = gemma_like("sandwich");
  cfg.qk_norm.type = NormKind::rms;
  auto offset_model = make_model(cfg, 41);
  perturb(offset_model, 42);
  auto plain_cfg = cfg;
  plain_cfg.norm_unit_offset = false;
  auto plain = make_model(plain_cfg, 41);
  auto same_w = make_model(plain_cfg, 41);
  {
    torch::NoGradGuard no_grad;
    auto src = offset_model->named_parameters(true);
    for (auto& p : plain->named_parameters(true)) {
      const bool gain = p.key().find("norm") != std::string::npos && ends_with(p.key(), "weight");
      p.value().copy_(gain ? src[p.key()] + 1.0 : src[p.key()]);
    }
    for (auto& p : same_w->named_parameters(true)) p.value().copy_(src[p.key()]);
  }
  auto idx = random_tokens(cfg, 2, 9);
  torch::NoGradGuard no_grad;
  auto want = offset_model->forward(idx);
  EXPECT_TENSOR_NEAR(plain->forward(idx), want, 1e-12, 1e-12);
  EXPECT_GT(max_abs_diff(same_w->forward(idx), want), 1e-2);
}
