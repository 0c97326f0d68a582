// collect_model_stats reports what a direct computation gives.
#include <gtest/gtest.h>

#include "model/init.h"
#include "train/model_stats.h"

using namespace keel;

TEST(ModelStats, MatchesDirectComputation) {
  ModelConfig cfg;
  cfg.vocab_size = 70;  // padded to 128: padded logits must not count
  cfg.max_seq_len = 16;
  cfg.d_model = 32;
  cfg.n_layers = 3;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.attn_softcap = 5.0;
  Transformer model = build_model(cfg, 4);
  torch::manual_seed(1);
  auto x = torch::randint(0, cfg.vocab_size, {2, 16}, torch::kInt64);
  auto stats = collect_model_stats(model, x, false);
  ASSERT_EQ(stats["attn"].size(), 3u);

  torch::NoGradGuard no_grad;
  std::vector<AttentionStats> layers;
  ForwardOptions o;
  o.attention_stats = &layers;
  auto logits = model->forward(x, o).narrow(-1, 0, cfg.vocab_size);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(stats["attn"][i]["max_logit"].get<double>(), layers[i].max_score.item<float>());
    EXPECT_DOUBLE_EQ(stats["attn"][i]["entropy"].get<double>(), layers[i].entropy.item<float>());
    EXPECT_LE(stats["attn"][i]["max_logit_capped"].get<double>(), 5.0);
  }
  // Activations: the residual stream after each block and each sublayer output, RMS and max |x|.
  ActivationRms acts;
  ForwardOptions ao;
  ao.activations = &acts;
  model->forward(x, ao);
  ASSERT_EQ(stats["activations"].size(), acts.names.size());
  for (size_t i = 0; i < acts.names.size(); ++i) {
    const auto& a = stats["activations"][acts.names[i]];
    EXPECT_DOUBLE_EQ(a["rms"].get<double>(), acts.values[i].item<float>()) << acts.names[i];
    EXPECT_DOUBLE_EQ(a["max_abs"].get<double>(), acts.max_abs[i].item<float>()) << acts.names[i];
    EXPECT_GE(a["max_abs"].get<double>(), a["rms"].get<double>()) << acts.names[i];
  }
  EXPECT_TRUE(stats["activations"].contains("block2.out"));
  EXPECT_TRUE(stats["activations"].contains("block0.attn"));
  auto log_z = torch::logsumexp(logits, -1);
  EXPECT_NEAR(stats["output"]["max_logit"].get<double>(), logits.abs().max().item<double>(), 1e-6);
  EXPECT_NEAR(stats["output"]["mean_log_z"].get<double>(), log_z.mean().item<double>(), 1e-5);
  EXPECT_NEAR(stats["output"]["z_loss"].get<double>(), log_z.pow(2).mean().item<double>(), 1e-4);
  // Parameter norm: the square root of the sum of squares of every parameter.
  double sq = 0;
  for (const auto& p : model->parameters()) sq += p.pow(2).sum().item<double>();
  EXPECT_NEAR(parameter_norm(model), std::sqrt(sq), 1e-3 * std::sqrt(sq));
}
