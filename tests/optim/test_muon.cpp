// Muon: which parameters it trains, the Newton–Schulz iteration (singular
// values in the published band, batched equal to one at a time), the update
// formula, the tensor learning rate and found_inf of CUDA graphs, per-head
// q/k/v, and the checkpointed state. Parity with torch.optim.Muon is
// Interop.KeelMuon below, driven by tests/python/test_muon_parity.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <set>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "model/init.h"
#include "optim/optim_test_util.h"
#include "test_util.h"
#include "optim/muon.h"

using namespace keel;

namespace {

TrainConfig muon_config() {
  TrainConfig t;
  t.optimizer = OptimizerKind::muon;
  t.lr = 2e-2;
  t.weight_decay = 0.1;
  t.muon.ns_dtype = MuonNsDtype::fp32;
  return t;
}

ModelConfig tiny_model() { return keel_test::tiny_optim_model(); }
using keel_test::named;
using keel_test::set_grads;

// U diag(s) Vᵀ with random orthogonal U, V and singular values s log-spaced in [lo, 1].
torch::Tensor with_spectrum(int64_t m, int64_t n, double lo, int64_t seed) {
  torch::manual_seed(seed);
  const int64_t k = std::min(m, n);
  auto u = std::get<0>(torch::linalg_qr(torch::randn({m, k}, torch::kFloat64)));
  auto v = std::get<0>(torch::linalg_qr(torch::randn({n, k}, torch::kFloat64)));
  auto s = torch::logspace(std::log10(lo), 0.0, k, 10.0, torch::kFloat64);
  return (u * s).mm(v.t()).to(torch::kFloat32);
}

}  // namespace

TEST(Muon, TrainsTheLinearsAndLeavesTheRestToAdamW) {
  auto cfg = tiny_model();
  cfg.sigma_reparam = true;  // its scalar gains go to AdamW, its matrices to Muon
  Transformer model = build_model(cfg, 1);
  Muon opt(named(model), muon_config(), cfg.d_model / cfg.n_heads);
  std::set<std::string> muon, adam;
  for (const auto& p : opt.muon_params()) muon.insert(p.name);
  for (const auto& p : opt.adamw().params()) adam.insert(p.name);
  EXPECT_EQ(muon.size(), 2u * 7u);  // wq wk wv wo w_gate w_up w_down per block
  for (const char* n : {"blocks.0.attn.wq", "blocks.1.attn.wo", "blocks.0.mlp.w_gate", "blocks.1.mlp.w_down"})
    EXPECT_TRUE(muon.count(n)) << n;
  for (const char* n : {"wte", "lm_head", "final_norm.weight", "blocks.0.attn.q_norm.weight", "blocks.0.attn_norm.weight",
                        "blocks.0.attn.wq_sigma.gamma"})
    EXPECT_TRUE(adam.count(n)) << n;
  EXPECT_EQ(muon.size() + adam.size(), named(model).size());
  EXPECT_EQ(opt.params().size(), named(model).size());
  // The settings table's lines name both parts and the shape groups.
  const auto lines = opt.describe();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("Muon on 14 matrices"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("fp32"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("AdamW on " + std::to_string(adam.size()) + " tensors"), std::string::npos) << lines[1];
}

TEST(Muon, NewtonSchulzSingularValuesLieInThePublishedBand) {
  // Five quintic steps take every singular value above ~0.0015 of the
  // Frobenius norm into [0.68, 1.21] (Jordan et al.: "S' ~ Uniform(0.5, 1.5)",
  // about 0.7-1.2 for these coefficients): square, wide and tall.
  for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{{48, 48}, {24, 72}, {72, 24}}) {
    for (int64_t seed = 1; seed <= 3; ++seed) {
      auto g = with_spectrum(m, n, 0.05, seed);
      auto o = newton_schulz(g, 5, torch::kFloat32);
      ASSERT_EQ(o.sizes(), g.sizes());
      auto s = torch::linalg_svdvals(o.to(torch::kFloat64));
      EXPECT_GE(s.min().item<double>(), 0.68) << m << "x" << n;
      EXPECT_LE(s.max().item<double>(), 1.21) << m << "x" << n;
      // The input's singular vectors are kept: O ≈ U S' Vᵀ, so O Gᵀ is symmetric positive semi-definite.
      auto ogt = o.to(torch::kFloat64).mm(g.to(torch::kFloat64).t());
      EXPECT_TRUE(torch::allclose(ogt, ogt.t(), 1e-4, 1e-5)) << m << "x" << n;
    }
  }
  // One step is not enough: the iteration is what lifts the small singular values.
  auto s1 = torch::linalg_svdvals(newton_schulz(with_spectrum(24, 72, 0.05, 1), 1, torch::kFloat32));
  EXPECT_LT(s1.min().item<float>(), 0.5f);
  // bf16 (the CUDA default) stays in the band within bf16's error.
  auto sb = torch::linalg_svdvals(newton_schulz(with_spectrum(24, 72, 0.05, 1), 5, torch::kBFloat16).to(torch::kFloat32));
  EXPECT_GE(sb.min().item<float>(), 0.6f);
  EXPECT_LE(sb.max().item<float>(), 1.3f);
}

TEST(Muon, BatchedNewtonSchulzEqualsOneMatrixAtATime) {
  torch::manual_seed(5);
  auto batch = torch::randn({4, 12, 20});
  auto together = newton_schulz(batch, 5, torch::kFloat32);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_TRUE(torch::allclose(together[i], newton_schulz(batch[i], 5, torch::kFloat32), 1e-5, 1e-6)) << i;
  auto tall = torch::randn({3, 20, 12});
  auto tall_together = newton_schulz(tall, 5, torch::kFloat32);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::allclose(tall_together[i], newton_schulz(tall[i], 5, torch::kFloat32), 1e-5, 1e-6)) << i;
  EXPECT_THROW(newton_schulz(torch::randn({2, 2, 2, 2}), 5, torch::kFloat32), std::invalid_argument);
}

TEST(Muon, UpdateFollowsTheFormula) {
  // Two steps on one matrix, written out: B ← μB + (1−μ)G, U = (1−μ)G + μB,
  // W ← W(1 − ηλ) − η·adjust·NS(U).
  auto t = muon_config();
  for (auto rule : {MuonAdjustLr::match_rms_adamw, MuonAdjustLr::spectral}) {
    t.muon.adjust_lr = rule;
    torch::manual_seed(9);
    auto w = torch::randn({24, 8}).requires_grad_(true);
    auto expect = w.detach().clone();
    auto buf = torch::zeros_like(expect);
    Muon opt({{"blocks.0.mlp.w_up", w}}, t, 0);
    const double adjust = rule == MuonAdjustLr::spectral ? std::sqrt(24.0 / 8.0) : 0.2 * std::sqrt(24.0);
    EXPECT_DOUBLE_EQ(muon_lr_adjustment(rule, 24, 8), adjust);
    for (int step = 0; step < 2; ++step) {
      auto g = torch::randn({24, 8});
      w.mutable_grad() = g.clone();
      opt.step(t.lr);
      buf = 0.95 * buf + 0.05 * g;
      auto u = 0.05 * g + 0.95 * buf;
      expect = expect * (1 - t.lr * t.weight_decay) - t.lr * adjust * newton_schulz(u, 5, torch::kFloat32);
      EXPECT_TRUE(torch::allclose(w.detach(), expect, 1e-5, 1e-6)) << "step " << step;
    }
    // Plain momentum (no Nesterov) uses the buffer itself.
    t.muon.nesterov = false;
    auto w2 = torch::randn({8, 8}).requires_grad_(true);
    auto before = w2.detach().clone();
    Muon plain({{"blocks.0.attn.wo", w2}}, t, 0);
    auto g = torch::randn({8, 8});
    w2.mutable_grad() = g.clone();
    plain.step(t.lr);
    auto expect2 = before * (1 - t.lr * t.weight_decay) -
                   t.lr * muon_lr_adjustment(rule, 8, 8) * newton_schulz(0.05 * g, 5, torch::kFloat32);
    EXPECT_TRUE(torch::allclose(w2.detach(), expect2, 1e-5, 1e-6));
    t.muon.nesterov = true;
  }
}

// train.cuda_graph passes the LR as a device tensor and skips a non-finite
// step with found_inf, both without a host sync.
TEST(Muon, TensorLearningRateAndFoundInf) {
  auto cfg = tiny_model();
  Transformer a = build_model(cfg, 11), b = build_model(cfg, 11);
  auto pa = named(a), pb = named(b);
  auto t = muon_config();
  Muon scalar(pa, t, 8), tensor(pb, t, 8);
  const double lrs[] = {0.015625, 0.0078125};
  for (int step = 0; step < 2; ++step) {
    set_grads(pa, 200 + step);
    set_grads(pb, 200 + step);
    scalar.step(lrs[step]);
    tensor.step(torch::full({}, lrs[step], torch::kFloat32));
  }
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::allclose(pa[i].param, pb[i].param, 1e-6, 1e-7)) << pa[i].name;
  std::vector<torch::Tensor> before, state_before;
  for (auto& p : pb) before.push_back(p.param.detach().clone());
  for (auto& s : tensor.state()) state_before.push_back(s.second.clone());
  set_grads(pb, 300);
  pb[0].param.mutable_grad().fill_(NAN);
  tensor.step(torch::full({}, 0.01, torch::kFloat32), torch::ones({}));
  for (size_t i = 0; i < pb.size(); ++i) EXPECT_TRUE(torch::equal(pb[i].param, before[i])) << pb[i].name;
  auto state = tensor.state();
  for (size_t i = 0; i < state.size(); ++i) EXPECT_TRUE(torch::equal(state[i].second, state_before[i])) << state[i].first;
  set_grads(pb, 300);
  tensor.step(torch::full({}, 0.01, torch::kFloat32), torch::zeros({}));
  for (size_t i = 0; i < pb.size(); ++i) EXPECT_FALSE(torch::equal(pb[i].param, before[i])) << pb[i].name;
}

TEST(Muon, SplitQkvHeadsOrthogonalisesEachHead) {
  auto t = muon_config();
  t.weight_decay = 0;
  t.muon.split_qkv_heads = true;
  t.muon.adjust_lr = MuonAdjustLr::spectral;  // 1 for every wide head matrix: the step is −η·NS(U)
  torch::manual_seed(3);
  auto wq = torch::zeros({4 * 6, 16}).requires_grad_(true);  // 4 heads of head_dim 6
  auto wo = torch::zeros({16, 4 * 6}).requires_grad_(true);
  Muon opt({{"blocks.0.attn.wq", wq}, {"blocks.0.attn.wo", wo}}, t, 6);
  wq.mutable_grad() = torch::randn({24, 16});
  wo.mutable_grad() = torch::randn({16, 24});
  opt.step(1.0);
  auto step_q = -wq.detach();
  for (int64_t h = 0; h < 4; ++h) {
    auto s = torch::linalg_svdvals(step_q.narrow(0, h * 6, 6));  // each head's block is orthogonalised alone
    EXPECT_GE(s.min().item<float>(), 0.6f) << h;
    EXPECT_LE(s.max().item<float>(), 1.25f) << h;
  }
  // As one matrix its singular values would be one set of 16; per head there are 4 x 6, all near 1.
  auto whole = torch::linalg_svdvals(step_q);
  EXPECT_GT(whole.max().item<float>(), 1.3f);
  // wo is not split.
  auto so = torch::linalg_svdvals(-wo.detach());
  EXPECT_LE(so.max().item<float>(), 1.25f);
  EXPECT_NE(opt.describe()[0].find("4×[6,16]"), std::string::npos) << opt.describe()[0];
}

TEST(Muon, StateRoundTripsAndRefusesAnAdamWCheckpoint) {
  auto cfg = tiny_model();
  Transformer a = build_model(cfg, 2), b = build_model(cfg, 2);
  auto pa = named(a), pb = named(b);
  Muon first(pa, muon_config(), 8), second(pb, muon_config(), 8);
  set_grads(pa, 1);
  first.step(1e-2);
  second.load_state(first.state());
  auto sa = first.state(), sb = second.state();
  ASSERT_EQ(sa.size(), sb.size());
  size_t momentum = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(torch::equal(sa[i].second, sb[i].second)) << sa[i].first;
    momentum += sa[i].first.rfind("muon_momentum.", 0) == 0;
  }
  EXPECT_EQ(momentum, first.muon_params().size());
  AdamW adam(pa, TrainConfig());
  EXPECT_THROW(second.load_state(adam.state()), CheckpointError);
}

// keel's side of tests/python/test_muon_parity.py. Skipped unless
// KEEL_INTEROP_DIR is set; reads $KEEL_INTEROP_DIR/requests.json:
//   [{"params": FILE | "model_config": YAML, "steps": N, "seed": S, "lr": [..],
//     "settings": {...}, "out": FILE, "groups": FILE}]
// The weights are FILE's (safetensors) or those of the model YAML
// describes, initialised from run.seed as `keel train` does. Step k's
// gradient of each parameter, in the order of their names, is
// torch.randn(shape) after torch.manual_seed(S + k): the same generator in
// LibTorch and PyTorch (the first step's gradients are written out, so the
// Python side checks that). "out" receives the initial weights
// ("init.<name>"), the first gradients ("grad0.<name>"), and the weights
// after the first and the last step ("step0.<name>", "last.<name>");
// "groups" (JSON) each parameter's part (muon/adamw) and weight decay.
TEST(Interop, KeelMuon) {
  const char* dir = std::getenv("KEEL_INTEROP_DIR");
  if (!dir) GTEST_SKIP() << "KEEL_INTEROP_DIR not set (run by tests/python/test_muon_parity.py)";
  int done = 0;
  for (const auto& r : nlohmann::json::parse(keel_test::read_file(std::string(dir) + "/requests.json"))) {
    const auto& s = r.at("settings");
    TrainConfig t;
    t.optimizer = OptimizerKind::muon;
    t.lr = s.at("lr");
    t.weight_decay = s.at("weight_decay");
    t.beta1 = s.value("beta1", 0.9);
    t.beta2 = s.value("beta2", 0.95);
    t.eps = s.value("eps", 1e-8);
    t.muon.momentum = s.at("momentum");
    t.muon.nesterov = s.at("nesterov");
    t.muon.ns_steps = s.at("ns_steps");
    t.muon.adjust_lr = keel_test::as<MuonAdjustLr>(s.at("adjust_lr").get<std::string>());
    t.muon.ns_dtype = keel_test::as<MuonNsDtype>(s.at("ns_dtype").get<std::string>());
    t.optimizer_impl = OptimizerImpl::fused;
    std::vector<NamedParam> params;
    Transformer model{nullptr};
    int64_t head_dim = 0;
    if (r.contains("model_config")) {
      const Config cfg = load_config(r.at("model_config").get<std::string>());
      model = build_model(cfg.model, cfg.run.seed);
      params = named(model);
      head_dim = cfg.model.d_model / cfg.model.n_heads;
    } else {
      for (auto& [name, w] : read_safetensors(r.at("params").get<std::string>()))
        params.push_back({name, w.to(torch::kFloat32).clone().requires_grad_(true)});
    }
    std::sort(params.begin(), params.end(), [](const NamedParam& x, const NamedParam& y) { return x.name < y.name; });
    Muon opt(params, t, head_dim);
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (auto& p : params) out.emplace_back("init." + p.name, p.param.detach().clone());
    const int64_t seed = r.at("seed"), steps = r.at("steps");
    const auto lrs = r.at("lr").get<std::vector<double>>();
    for (int64_t k = 0; k < steps; ++k) {
      torch::manual_seed(static_cast<uint64_t>(seed + k));
      for (auto& p : params) {
        p.param.mutable_grad() = torch::randn(p.param.sizes());
        if (k == 0) out.emplace_back("grad0." + p.name, p.param.grad().clone());
      }
      opt.step(lrs.at(static_cast<size_t>(k)));
      for (const char* tag : {"step0.", "last."})
        if ((k == 0 && tag[0] == 's') || (k == steps - 1 && tag[0] == 'l'))
          for (auto& p : params) out.emplace_back(tag + p.name, p.param.detach().clone());
    }
    write_safetensors(r.at("out").get<std::string>(), out);
    nlohmann::json groups = nlohmann::json::object();
    std::set<std::string> muon;
    for (const auto& p : opt.muon_params()) muon.insert(p.name);
    for (const auto& p : params)
      groups[p.name] = {{"part", muon.count(p.name) ? "muon" : "adamw"},
                        {"weight_decay", wants_weight_decay(p.name, t) ? t.weight_decay : 0.0}};
    std::ofstream(r.at("groups").get<std::string>()) << groups.dump();
    ++done;
  }
  EXPECT_GT(done, 0);
}
