// The shared feature configs (feature_configs.h): they vary every model.* key,
// each is a valid config, and each model's forward equals the independent
// fp64 reference forward (test_model_reference.h).
#include <gtest/gtest.h>

#include <set>

#include "config/config.h"
#include "feature_configs.h"

using namespace keel_model_test;

namespace {

// key path -> value as the schema writes it, for the model section of `m`.
std::map<std::string, std::string> model_values(const keel::ModelConfig& m) {
  keel::Config c;
  c.model = m;
  keel::Schema s = keel::make_schema(c);
  std::map<std::string, std::string> out;
  for (const auto& k : s.keys())
    if (k.path.rfind("model.", 0) == 0) out[k.path] = s.value_string(k);
  return out;
}

}  // namespace

TEST(FeatureConfigs, VaryEveryModelKey) {
  const auto base = model_values(tiny_config());
  std::set<std::string> varied;
  for (const auto& f : feature_configs())
    for (const auto& [key, value] : model_values(f.config()))
      if (base.at(key) != value) varied.insert(key);
  for (const auto& [key, value] : base)
    EXPECT_TRUE(varied.count(key)) << key << " is varied by no entry of tests/model/feature_configs.h: add one, "
                                   << "so the size, reference and Hugging Face tests see it";
}

TEST(FeatureConfigs, EachIsValid) {
  std::set<std::string> names;
  for (const auto& f : feature_configs()) {
    SCOPED_TRACE(f.name);
    EXPECT_TRUE(names.insert(f.name).second) << "duplicate name";
    keel::Config c;
    c.model = f.config();
    c.train.seq_len = 0;
    EXPECT_NO_THROW(keel::validate(c));
  }
}

TEST(FeatureConfigs, ForwardMatchesReference) {
  for (const auto& f : feature_configs()) {
    SCOPED_TRACE(f.name);
    const auto cfg = f.config();
    auto model = make_model(cfg, 7);
    perturb(model, 8);
    auto idx = random_tokens(cfg, 2, std::min<int64_t>(cfg.max_seq_len, 12));
    torch::NoGradGuard no_grad;
    // Softcap, clamp and clipped softmax take the explicit path, whose scores are fp32 (as Gemma 2 computes tanh).
    const bool fp32_scores = cfg.attn_softcap || cfg.attn_logit_clamp || cfg.clipped_softmax;
    const double rtol = fp32_scores ? 1e-5 : 1e-9, atol = fp32_scores ? 1e-6 : 1e-11;
    EXPECT_TENSOR_NEAR(model->forward(idx), ref_forward(model, idx), rtol, atol);
  }
}
