// AdamW: fused kernel vs the readable reference vs a hand-written formula;
// parameter groups; device-side clipping; gradient accumulation equivalence.
#include <gtest/gtest.h>

#include <cmath>

#include "model/init.h"
#include "optim/optim_test_util.h"
#include "test_util.h"
#include "optim/grad_norms.h"
#include "optim/optimizer.h"
#include "optim/zero.h"
#include "train/step_runner.h"

using namespace keel;

namespace {

TrainConfig adam_config(const std::string& impl) {
  TrainConfig t;
  t.lr = 1e-2;
  t.beta1 = 0.9;
  t.beta2 = 0.95;
  t.eps = 1e-8;
  t.weight_decay = 0.1;
  t.optimizer_impl = keel_test::as<keel::OptimizerImpl>(impl);
  return t;
}

ModelConfig tiny_model() { return keel_test::tiny_optim_model(); }
using keel_test::named;
using keel_test::set_grads;

}  // namespace

TEST(AdamW, ParameterGroups) {
  TrainConfig t;
  EXPECT_TRUE(wants_weight_decay("blocks.0.attn.wq", t));
  EXPECT_TRUE(wants_weight_decay("blocks.0.mlp.w_down", t));
  EXPECT_TRUE(wants_weight_decay("lm_head", t));
  EXPECT_FALSE(wants_weight_decay("blocks.0.attn_norm.weight", t));
  EXPECT_FALSE(wants_weight_decay("blocks.0.attn.q_norm.weight", t));
  EXPECT_FALSE(wants_weight_decay("blocks.0.attn.wq_bias", t));
  EXPECT_FALSE(wants_weight_decay("blocks.1.attn.temperature", t));
  EXPECT_FALSE(wants_weight_decay("final_norm.weight", t));
  EXPECT_FALSE(wants_weight_decay("wte", t));
  t.decay_embeddings = true;
  EXPECT_TRUE(wants_weight_decay("wte", t));
}

TEST(AdamW, ReferenceMatchesHandWrittenFormula) {
  auto t = adam_config("reference");
  auto w = torch::tensor({1.0, -2.0, 0.5}, torch::kFloat64).requires_grad_(true);
  auto b = torch::tensor({0.3}, torch::kFloat64).requires_grad_(true);
  AdamW opt({{"layer.w", w}, {"layer.w_bias", b}}, t);
  std::vector<double> wv = {1.0, -2.0, 0.5}, m(3, 0), v(3, 0);
  for (int step = 1; step <= 3; ++step) {
    std::vector<double> g = {0.1 * step, -0.2, 0.05 * step * step};
    w.mutable_grad() = torch::tensor(g, torch::kFloat64);
    b.mutable_grad() = torch::tensor({1.0}, torch::kFloat64);
    opt.step(t.lr);
    for (int i = 0; i < 3; ++i) {
      wv[i] *= 1 - t.lr * t.weight_decay;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(0.9, step)), vh = v[i] / (1 - std::pow(0.95, step));
      wv[i] -= t.lr * mh / (std::sqrt(vh) + t.eps);
    }
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i].item<double>(), wv[i], 1e-12) << "step " << step;
  }
  // The bias is in the no-decay group: after 3 steps of gradient 1 it moved by
  // exactly 3 * lr (Adam's update is lr * sign when the gradient is constant).
  EXPECT_NEAR(b.item<double>(), 0.3 - 3 * t.lr, 1e-6);
}

TEST(AdamW, FusedEqualsReferenceOnAModel) {
  auto cfg = tiny_model();
  Transformer a = build_model(cfg, 7), b = build_model(cfg, 7);
  auto pa = named(a), pb = named(b);
  AdamW fused(pa, adam_config("fused")), ref(pb, adam_config("reference"));
  ASSERT_TRUE(fused.fused());
  ASSERT_FALSE(ref.fused());
  for (int step = 0; step < 5; ++step) {
    set_grads(pa, 100 + step);
    set_grads(pb, 100 + step);
    fused.step(1e-2 * (step + 1));
    ref.step(1e-2 * (step + 1));
  }
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i].param, pb[i].param, 1e-5, 1e-6)) << pa[i].name;
  auto sa = fused.state(), sb = ref.state();
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_TRUE(torch::allclose(sa[i].second, sb[i].second, 1e-5, 1e-7)) << sa[i].first;
}

// train.cuda_graph passes the LR as a device tensor (step_runner.h): the
// fused kernel's tensor-LR form must take the same step as the scalar one,
// for both parameter groups, and honour found_inf alike.
TEST(AdamW, TensorLearningRateEqualsScalar) {
  auto cfg = tiny_model();
  Transformer a = build_model(cfg, 11), b = build_model(cfg, 11);
  auto pa = named(a), pb = named(b);
  AdamW scalar(pa, adam_config("fused")), tensor(pb, adam_config("fused"));
  // Learning rates exact in float32, so the tensor's rounding cannot matter.
  const double lrs[] = {0.015625, 0.0078125, 0.00390625};
  for (int step = 0; step < 3; ++step) {
    set_grads(pa, 200 + step);
    set_grads(pb, 200 + step);
    scalar.step(lrs[step]);
    tensor.step(torch::full({}, lrs[step], torch::kFloat32));
  }
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].param, pb[i].param)) << pa[i].name;
  std::vector<torch::Tensor> before;
  for (auto& p : pb) before.push_back(p.param.detach().clone());
  set_grads(pb, 300);
  tensor.step(torch::full({}, 0.01, torch::kFloat32), torch::ones({}));  // skipped on the device
  for (size_t i = 0; i < pb.size(); ++i) EXPECT_TRUE(torch::equal(pb[i].param, before[i])) << pb[i].name;
  // The reference loop reads the tensor back and takes the same step as with the scalar.
  Transformer c = build_model(cfg, 11), d = build_model(cfg, 11);
  auto pc = named(c), pd = named(d);
  AdamW ref_scalar(pc, adam_config("reference")), ref_tensor(pd, adam_config("reference"));
  set_grads(pc, 400);
  set_grads(pd, 400);
  ref_scalar.step(0.015625);
  ref_tensor.step(torch::full({}, 0.015625, torch::kFloat32));
  for (size_t i = 0; i < pc.size(); ++i) EXPECT_TRUE(torch::equal(pc[i].param, pd[i].param)) << pc[i].name;
}

TEST(AdamW, FoundInfSkipsTheUpdateOnTheDevice) {
  auto cfg = tiny_model();
  Transformer a = build_model(cfg, 3);
  auto pa = named(a);
  AdamW opt(pa, adam_config("fused"));
  set_grads(pa, 1);
  std::vector<torch::Tensor> before;
  for (auto& p : pa) before.push_back(p.param.detach().clone());
  opt.step(1e-2, torch::ones({}));
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].param, before[i])) << pa[i].name;
  for (const auto& s : opt.state()) {
    if (s.first.rfind("step.", 0) == 0) {
      EXPECT_EQ(s.second.item<float>(), 0.0f);
    }
  }
  opt.step(1e-2, torch::zeros({}));
  EXPECT_FALSE(torch::equal(pa[0].param, before[0]));
}

TEST(AdamW, IndependentWeightDecayFollowsScheduleShape) {
  auto t = adam_config("reference");
  t.independent_weight_decay = true;
  t.weight_decay = 1e-4;
  t.lr = 1e-2;
  auto w = torch::tensor({2.0}, torch::kFloat64).requires_grad_(true);
  AdamW opt({{"w", w}}, t);
  w.mutable_grad() = torch::zeros({1}, torch::kFloat64);
  opt.step(t.lr / 2);  // half the peak: decay by wd/2, not lr*wd/2
  EXPECT_NEAR(w.item<double>(), 2.0 * (1 - 1e-4 / 2), 1e-15);
}

TEST(Clip, GlobalNormAndScalingOnDevice) {
  auto a = torch::zeros({3}).requires_grad_(true), b = torch::zeros({2}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f, 0.0f});
  b.mutable_grad() = torch::tensor({0.0f, 4.0f});
  std::vector<NamedParam> ps = {{"a", a}, {"b", b}};
  auto norm = clip_grad_norm(ps, 1.0);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-6);  // returned norm is before clipping
  EXPECT_NEAR(a.grad()[0].item<double>(), 3.0 / 5.0, 1e-5);
  EXPECT_NEAR(b.grad()[1].item<double>(), 4.0 / 5.0, 1e-5);
  auto norm2 = clip_grad_norm(ps, 10.0);  // below the threshold: untouched
  EXPECT_NEAR(norm2.item<double>(), 1.0, 1e-5);
  EXPECT_NEAR(a.grad()[0].item<double>(), 0.6, 1e-5);
}

// Issue 52: ZeRO-1's clipping copied the owner mask to the device on every
// step, a host-to-device copy from pageable memory that makes a CUDA host
// wait. It is made once and kept while the flags and the device stay.
TEST(Clip, UnderAShardTheOwnerMaskIsCopiedOncePerRun) {
  auto a = torch::zeros({3}).requires_grad_(true), b = torch::zeros({2}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f, 0.0f});
  b.mutable_grad() = torch::tensor({0.0f, 4.0f});
  std::vector<NamedParam> ps = {{"a", a}, {"b", b}};
  GradShard shard;
  shard.owned = {1, 0};            // this rank owns a
  shard.sum = [](torch::Tensor&) {};  // one rank: the sum is itself
  const int64_t before = owner_mask_uploads();
  for (int step = 0; step < 5; ++step) {
    auto norm = clip_grad_norm(ps, 0.0, &shard);
    EXPECT_NEAR(norm.item<double>(), 3.0, 1e-6) << "b's norm is its owner's to add";
  }
  EXPECT_EQ(owner_mask_uploads() - before, 1);
  shard.owned = {0, 1};  // other flags: a new mask
  EXPECT_NEAR(clip_grad_norm(ps, 0.0, &shard).item<double>(), 4.0, 1e-6);
  EXPECT_EQ(owner_mask_uploads() - before, 2);
}

TEST(Accumulation, FourMicroBatchesOfTwoEqualOneOfEight) {
  auto cfg = tiny_model();
  Transformer a = build_model(cfg, 11), b = build_model(cfg, 11);
  a->to(torch::kFloat64);
  b->to(torch::kFloat64);
  torch::manual_seed(5);
  auto tokens = torch::randint(0, cfg.vocab_size, {8, 9}, torch::kInt64);
  auto x = tokens.narrow(1, 0, 8), y = tokens.narrow(1, 1, 8);
  auto full = language_model_loss(a->forward(x), y, 1e-4);
  full.total.backward();
  double acc_loss = 0;
  for (int i = 0; i < 4; ++i) {
    auto part = language_model_loss(b->forward(x.narrow(0, 2 * i, 2)), y.narrow(0, 2 * i, 2), 1e-4);
    (part.total / 4.0).backward();
    acc_loss += part.total.item<double>() / 4.0;
  }
  EXPECT_NEAR(full.total.item<double>(), acc_loss, 1e-12);
  auto pa = named(a), pb = named(b);
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i].param.grad(), pb[i].param.grad(), 1e-9, 1e-12)) << pa[i].name;
}

TEST(Overfit, TinyModelMemorisesOneBatch) {
  auto cfg = tiny_model();
  cfg.d_model = 32;
  cfg.max_seq_len = 16;
  Transformer model = build_model(cfg, 1);
  auto ps = named(model);
  auto t = adam_config("fused");
  t.weight_decay = 0.0;
  t.lr = 1e-2;
  AdamW opt(ps, t);
  torch::manual_seed(2);
  auto tokens = torch::randint(0, cfg.vocab_size, {4, 17}, torch::kInt64);
  auto x = tokens.narrow(1, 0, 16), y = tokens.narrow(1, 1, 16);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    auto loss = language_model_loss(model->forward(x), y, 0.0);
    loss.total.backward();
    clip_grad_norm(ps, 1.0);
    opt.step(t.lr);
    if (step == 0) first = loss.ce.item<double>();
    last = loss.ce.item<double>();
  }
  EXPECT_GT(first, 3.5);  // about log(50) at init
  EXPECT_LT(last, 0.05) << "did not memorise one batch: loss " << first << " -> " << last;
}

// A StepRunner refuses, by itself, an optimizer that a CUDA graph cannot
// capture (the reference AdamW reads the learning rate on the host), whether
// or not the config check ran first; checked on every device, so here too.
TEST(StepRunnerGraph, RefusesAnOptimizerThatCannotBeCapturedWithTheKey) {
  for (OptimizerKind kind : {OptimizerKind::adamw, OptimizerKind::muon}) {
    for (const char* impl : {"reference", "fused"}) {
      SCOPED_TRACE(name_of(kind) + std::string(" / ") + impl);
      Config c;
      c.model = tiny_model();
      c.train = adam_config(impl);
      c.train.optimizer = kind;
      c.train.cuda_graph = true;
      Transformer model = build_model(c.model, 1);
      auto opt = make_optimizer(named(model), c.train, c.model.head_dim());
      ComputeSetup cpu;
      if (std::string(impl) == "reference") {
        EXPECT_FALSE(opt->graph_capture_obstacle().empty());
        try {
          StepRunner runner(model, *opt, c, cpu, 2);
          ADD_FAILURE() << "a reference optimizer was accepted for a CUDA graph";
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("train.cuda_graph"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("train.optimizer_impl: reference"), std::string::npos) << e.what();
        }
      } else {
        EXPECT_EQ(opt->graph_capture_obstacle(), "");
        EXPECT_NO_THROW(StepRunner(model, *opt, c, cpu, 2));
      }
    }
  }
}

// ZeRO-1's dealing: largest first to the least loaded rank, deterministic,
// every parameter owned once, loads within the largest parameter of each other.
TEST(ZeroOwners, LargestFirstToTheLeastLoadedRank) {
  const std::vector<int64_t> numels = {100, 10, 60, 60, 5, 40, 100};
  // In size order: 100 (#0) to rank 0, 100 (#6) to 1, 60 (#2) to 0 (a tie: the lowest), 60 (#3) to 1,
  // 40 (#5) to 0, 10 (#1) to 1, 5 (#4) to 1 (170 < 200): loads 200 and 175.
  EXPECT_EQ(keel::zero_owners(numels, 2), (std::vector<int>{0, 1, 0, 1, 1, 0, 1}));
  for (int world : {1, 2, 3, 5}) {
    const auto owner = keel::zero_owners(numels, world);
    std::vector<int64_t> load(static_cast<size_t>(world), 0);
    for (size_t i = 0; i < numels.size(); ++i) {
      ASSERT_GE(owner[i], 0);
      ASSERT_LT(owner[i], world);
      load[static_cast<size_t>(owner[i])] += numels[i];
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 100) << world << " ranks";
  }
}
