// monitor/param_stats.h against the values computed by hand after one
// AdamW step with gradients planted so that a known share of the second
// moment lies under ε; Muon's matrices report their momentum instead.
#include <gtest/gtest.h>

#include "monitor/param_stats.h"
#include "optim/optimizer.h"

using namespace keel;

namespace {

double rms(const torch::Tensor& t) { return t.to(torch::kFloat64).pow(2).mean().sqrt().item<double>(); }

}  // namespace

TEST(ParamStats, AdamWStepByHand) {
  TrainConfig t;
  t.optimizer = OptimizerKind::adamw;
  t.optimizer_impl = OptimizerImpl::reference;
  t.eps = 1e-8;
  t.beta1 = 0.9;
  t.beta2 = 0.95;
  t.weight_decay = 0.0;
  torch::manual_seed(2);
  auto w = torch::randn({4, 8}).requires_grad_(true);
  auto b = torch::randn({8}).requires_grad_(true);
  AdamW opt({{"blocks.0.attn.wq", w}, {"blocks.0.attn.wq_bias", b}}, t);
  // Half of wq's gradient entries far under eps (√v̂ = |g| after one step), a quarter in [eps, 10 eps).
  auto g = torch::ones({4, 8});
  g.narrow(0, 0, 2).fill_(1e-10);
  g.narrow(0, 2, 1).fill_(5e-8);
  w.mutable_grad() = g;
  b.mutable_grad() = torch::full({8}, 0.5);
  std::vector<torch::Tensor> before = {w.detach().clone(), b.detach().clone()};
  opt.step(1e-3);
  auto stats = param_stats(opt, before, t.eps, t.beta2);
  const auto& s = stats["blocks.0.attn.wq"];
  EXPECT_NEAR(s["grad_rms"].get<double>(), rms(g), 1e-6);
  EXPECT_NEAR(s["weight_rms"].get<double>(), rms(w.detach()), 1e-6);
  EXPECT_NEAR(s["update_rms"].get<double>(), rms(w.detach() - before[0]), 1e-9);
  EXPECT_NEAR(s["update_ratio"].get<double>(), rms(w.detach() - before[0]) / rms(w.detach()), 1e-6);
  EXPECT_NEAR(s["m_rms"].get<double>(), rms(0.1 * g), 1e-7);  // m = (1 - β1) g after one step
  EXPECT_DOUBLE_EQ(s["v_below_eps"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(s["v_below_10eps"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(stats["blocks.0.attn.wq_bias"]["v_below_eps"].get<double>(), 0.0);
  // A parameter without a gradient reports none (null), not a number.
  b.mutable_grad() = torch::Tensor();
  EXPECT_TRUE(param_stats(opt, before, t.eps, t.beta2)["blocks.0.attn.wq_bias"]["grad_rms"].is_null());
}

TEST(ParamStats, MuonMatricesReportTheirMomentum) {
  TrainConfig t;
  t.optimizer = OptimizerKind::muon;
  t.weight_decay = 0.0;
  torch::manual_seed(3);
  auto w = torch::randn({16, 16}).requires_grad_(true);
  auto e = torch::randn({10, 16}).requires_grad_(true);
  auto opt = make_optimizer({{"blocks.0.mlp.w_up", w}, {"wte", e}}, t, 16);
  w.mutable_grad() = torch::randn({16, 16});
  e.mutable_grad() = torch::randn({10, 16});
  std::vector<torch::Tensor> before = {w.detach().clone(), e.detach().clone()};
  opt->record_step_stats(true);
  opt->step(1e-2);
  opt->record_step_stats(false);
  auto stats = param_stats(*opt, before, t.eps, t.beta2);
  const auto& m = stats["blocks.0.mlp.w_up"];
  // Newton–Schulz gives a near-orthogonal matrix: singular values near 1, RMS near 1/sqrt(16).
  EXPECT_NEAR(m["ns_sigma_max"].get<double>(), 1.0, 0.35);
  EXPECT_NEAR(m["ns_rms"].get<double>(), 0.25, 0.1);
  // The update's spectral norm (LR x adjustment x sigma_max): without decay, the applied update's.
  auto applied = (w.detach() - before[0]).to(torch::kFloat64);
  EXPECT_NEAR(torch::linalg_matrix_norm(applied, 2).item<double>(), m["update_spectral"].get<double>(), 1e-5);
  EXPECT_FALSE(stats["wte"].contains("ns_rms"));
  EXPECT_GT(m["m_rms"].get<double>(), 0);
  EXPECT_FALSE(m.contains("v_below_eps"));  // no second moment
  EXPECT_GT(m["update_rms"].get<double>(), 0);
  EXPECT_TRUE(stats["wte"].contains("v_below_eps"));  // AdamW's part
}
