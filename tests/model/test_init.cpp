// Weight initialisation: reproducible per seed, norms at gain 1 / bias 0,
// depth-scaled output projections, truncated normal within +-k std.
#include "test_model_reference.h"

using namespace keel_model_test;

namespace {

keel::ModelConfig init_config() {
  keel::ModelConfig c;
  c.vocab_size = 256;
  c.pad_vocab_multiple = 64;
  c.max_seq_len = 32;
  c.d_model = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 256;
  c.init.std = 0.02;
  return c;
}

// Every value of the parameters whose name ends with one of `suffixes`.
torch::Tensor gather(keel::Transformer& m, const std::vector<std::string>& suffixes) {
  std::vector<torch::Tensor> parts;
  for (auto& item : m->named_parameters(true))
    for (const auto& s : suffixes)
      if (ends_with(item.key(), s)) parts.push_back(item.value().detach().flatten().to(torch::kFloat64));
  EXPECT_FALSE(parts.empty());
  return torch::cat(parts);
}

const std::vector<std::string> kOut = {"attn.wo", "mlp.w_down"};
const std::vector<std::string> kIn = {"attn.wq", "attn.wk", "attn.wv", "mlp.w_gate", "mlp.w_up", "wte", "lm_head"};

// Std of N(0,1) truncated at +-k: sqrt(1 - 2k phi(k) / (2 Phi(k) - 1)).
double truncated_std_factor(double k) {
  const double phi = std::exp(-0.5 * k * k) / std::sqrt(2 * M_PI);
  const double mass = std::erf(k / std::sqrt(2.0));
  return std::sqrt(1 - 2 * k * phi / mass);
}

TEST(Init, SameSeedSameWeightsDifferentSeedDifferent) {
  auto cfg = tiny_config();
  cfg.bias = true;
  cfg.qk_norm.type = NormKind::l2;
  cfg.qk_norm.temperature_learnable = false;
  auto a = keel::build_model(cfg, 123), b = keel::build_model(cfg, 123), c = keel::build_model(cfg, 124);
  auto pb = b->named_parameters(true), pc = c->named_parameters(true);
  int64_t random_params = 0;
  for (auto& item : a->named_parameters(true)) {
    const auto& n = item.key();
    EXPECT_TRUE(torch::equal(item.value(), pb[n])) << n;
    const bool random = item.value().std().item<double>() > 0;  // not a constant fill
    if (random) {
      ++random_params;
      EXPECT_FALSE(torch::equal(item.value(), pc[n])) << n;
    } else {
      EXPECT_TRUE(torch::equal(item.value(), pc[n])) << n;
    }
  }
  EXPECT_GE(random_params, 2 + 7 * cfg.n_layers);  // wte, lm_head, wq wk wv wo w_gate w_up w_down
  for (auto& item : a->named_buffers(true))
    EXPECT_TRUE(torch::equal(item.value(), b->named_buffers(true)[item.key()])) << item.key();
  // Re-initialising in place with the same seed restores the weights.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : a->parameters()) p.add_(1.0);
  }
  keel::init_weights(a, cfg, 123);
  for (auto& item : a->named_parameters(true)) EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
}

TEST(Init, NormWeightsOneBiasesZero) {
  auto cfg = tiny_config();
  cfg.norm = NormKind::layernorm;
  cfg.bias = true;
  cfg.norm_placement = NormPlacement::sandwich;
  cfg.embed_norm = EmbedNorm::layernorm;
  cfg.qk_norm.type = NormKind::layernorm;
  cfg.qk_norm.bias = true;
  cfg.qk_norm.gain_per_head = true;
  auto m = keel::build_model(cfg, 9);
  int64_t norm_weights = 0, biases = 0;
  for (auto& item : m->named_parameters(true)) {
    const auto& n = item.key();
    const auto& p = item.value();
    if (n.find("norm") != std::string::npos && ends_with(n, "weight")) {
      ++norm_weights;
      EXPECT_TRUE(torch::equal(p, torch::ones_like(p))) << n;
    } else if (ends_with(n, "bias")) {
      ++biases;
      EXPECT_TRUE(torch::equal(p, torch::zeros_like(p))) << n;
    } else {
      EXPECT_GT(p.abs().max().item<double>(), 0) << n;  // nothing left uninitialised at 0
      EXPECT_TRUE(torch::isfinite(p).all().item<bool>()) << n;
    }
  }
  // embed + final + 4 block norms and q/k norms per layer.
  EXPECT_EQ(norm_weights, 2 + cfg.n_layers * 6);
  // attention 4 + mlp 3 linear biases, 4 block norm biases, 2 qk-norm biases per layer; embed + final norm.
  EXPECT_EQ(biases, cfg.n_layers * (4 + 3 + 4 + 2) + 2);
}

// GPT-2: output projections (attention wo, MLP w_down) use std / sqrt(2 n_layers).
TEST(Init, DepthScaledOutputProjections) {
  auto cfg = init_config();
  auto m = keel::build_model(cfg, 3);
  const double out_std = 0.02 / std::sqrt(2.0 * cfg.n_layers);
  auto out = gather(m, kOut), in = gather(m, kIn);
  EXPECT_GT(out.numel(), 100000);
  EXPECT_NEAR(out.std().item<double>(), out_std, 0.03 * out_std);
  EXPECT_NEAR(in.std().item<double>(), 0.02, 0.03 * 0.02);
  EXPECT_NEAR(out.mean().item<double>(), 0.0, 5 * out_std / std::sqrt(double(out.numel())));
  EXPECT_NEAR(in.mean().item<double>(), 0.0, 5 * 0.02 / std::sqrt(double(in.numel())));
  // Each output projection on its own.
  for (auto& item : m->named_parameters(true)) {
    for (const auto& s : kOut) {
      if (ends_with(item.key(), s)) {
        EXPECT_NEAR(item.value().std().item<double>(), out_std, 0.05 * out_std) << item.key();
      }
    }
  }

  cfg.init.depth_scaled = false;
  auto flat = keel::build_model(cfg, 3);
  EXPECT_NEAR(gather(flat, kOut).std().item<double>(), 0.02, 0.03 * 0.02);

  cfg.init.depth_scaled = true;
  cfg.n_layers = 1;
  cfg.init.std = 0.1;
  auto one = keel::build_model(cfg, 3);
  EXPECT_NEAR(gather(one, kOut).std().item<double>(), 0.1 / std::sqrt(2.0), 0.03 * 0.1 / std::sqrt(2.0));
}

// Truncated at +-k std: no value beyond the bound, the bound is reached, the
// std is that of a truncated normal, and nothing piles up at the bound (a
// clamped normal would put 4.6% of the mass there for k = 2).
TEST(Init, TruncatedNormal) {
  for (double k : {2.0, 3.0}) {
    SCOPED_TRACE(k);
    auto cfg = init_config();
    cfg.init.truncate = k;
    auto m = keel::build_model(cfg, 5);
    const double out_std = 0.02 / std::sqrt(2.0 * cfg.n_layers);
    for (auto [values, std] : {std::make_pair(gather(m, kIn), 0.02), std::make_pair(gather(m, kOut), out_std)}) {
      const double bound = k * std;
      const double mx = values.abs().max().item<double>();
      EXPECT_LE(mx, bound * (1 + 1e-6));
      EXPECT_GT(mx, 0.97 * bound);
      EXPECT_NEAR(values.std().item<double>(), std * truncated_std_factor(k), 0.03 * std);
      const double at_bound = (values.abs() > bound * (1 - 1e-6)).to(torch::kFloat64).mean().item<double>();
      EXPECT_LT(at_bound, 1e-3);
      EXPECT_NEAR(values.mean().item<double>(), 0.0, 5 * std / std::sqrt(double(values.numel())));
    }
  }
  // Without truncation values beyond 3 std do occur.
  auto m = keel::build_model(init_config(), 5);
  EXPECT_GT(gather(m, kIn).abs().max().item<double>(), 3.5 * 0.02);
}

TEST(Init, TruncatedStdFactorSanity) {
  // Independent checks of the helper: large k -> 1; k = 1 -> variance 0.29113 (tables).
  EXPECT_NEAR(truncated_std_factor(10.0), 1.0, 1e-9);
  EXPECT_NEAR(truncated_std_factor(1.0), std::sqrt(0.29113), 1e-4);
}

}  // namespace
