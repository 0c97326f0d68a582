// GPU checks (CTest label "gpu"); each test skips cleanly without CUDA.
// Run on a GPU machine by scripts/gpu_check.sh.
#include <gtest/gtest.h>

#include "checkpoint/posix_io.h"
#include "model/init.h"
#include "test_util.h"
#include "train/device.h"
#include "train/optimizer.h"
#include "train/train_state.h"

using namespace keel;

namespace {

bool have_cuda() { return torch::cuda::is_available(); }

ModelConfig gpu_model() {
  ModelConfig m;
  m.vocab_size = 300;
  m.max_seq_len = 64;
  m.d_model = 128;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.qk_norm.type = "rms";
  return m;
}

}  // namespace

TEST(Cuda, FlashSdpaWithNativeGqaMatchesExplicitPath) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(0);
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto q = torch::randn({2, 8, 128, 64}, opts), k = torch::randn({2, 2, 128, 64}, opts),
       v = torch::randn({2, 2, 128, 64}, opts);
  // With the math backend disabled an ineligible call throws (REFERENCE.md §8):
  // success proves a fused kernel ran.
  at::globalContext().setSDPUseMath(false);
  torch::Tensor fused;
  EXPECT_NO_THROW(fused = at::scaled_dot_product_attention(q, k, v, c10::nullopt, 0.0, true, 0.125, true));
  at::globalContext().setSDPUseMath(true);
  auto ref = explicit_attention(q.to(torch::kFloat32), k.to(torch::kFloat32), v.to(torch::kFloat32), 0.125,
                                c10::nullopt, nullptr);
  auto err = (fused.to(torch::kFloat32) - ref).norm() / ref.norm();
  EXPECT_LT(err.item<double>(), 1e-2);
}

TEST(Cuda, FusedAdamWEqualsReference) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  auto cfg = gpu_model();
  Transformer a = build_model(cfg, 5, torch::kCUDA), b = build_model(cfg, 5, torch::kCUDA);
  std::vector<NamedParam> pa, pb;
  for (auto& p : a->named_parameters()) pa.push_back({p.key(), p.value()});
  for (auto& p : b->named_parameters()) pb.push_back({p.key(), p.value()});
  TrainConfig t;
  t.lr = 1e-2;
  t.optimizer_impl = "fused";
  AdamW fused(pa, t);
  t.optimizer_impl = "reference";
  AdamW ref(pb, t);
  for (int s = 0; s < 4; ++s) {
    torch::manual_seed(10 + s);
    for (size_t i = 0; i < pa.size(); ++i) {
      auto g = torch::randn_like(pa[i].param);
      pa[i].param.mutable_grad() = g;
      pb[i].param.mutable_grad() = g.clone();
    }
    fused.step(1e-2);
    ref.step(1e-2);
  }
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i].param, pb[i].param, 1e-5, 1e-6)) << pa[i].name;
}

TEST(Cuda, LossFallsUnderBf16Autocast) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  auto cfg = gpu_model();
  Transformer model = build_model(cfg, 1, torch::kCUDA);
  std::vector<NamedParam> ps;
  for (auto& p : model->named_parameters()) ps.push_back({p.key(), p.value()});
  TrainConfig t;
  t.lr = 3e-3;
  AdamW opt(ps, t);
  torch::manual_seed(3);
  auto tokens = torch::randint(0, cfg.vocab_size, {8, 65}, torch::kInt64).to(torch::kCUDA);
  auto x = tokens.narrow(1, 0, 64), y = tokens.narrow(1, 1, 64);
  double first = 0, last = 0;
  for (int s = 0; s < 100; ++s) {
    opt.zero_grad();
    LossParts loss;
    {
      AutocastScope autocast(true);  // the trainer's scope: clears the weight cache on exit
      auto logits = model->forward(x);
      EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
      loss = language_model_loss(logits, y, 1e-4);
    }
    loss.total.backward();
    clip_grad_norm(ps, 1.0);
    opt.step(t.lr);
    if (s == 0) first = loss.ce.item<double>();
    last = loss.ce.item<double>();
  }
  EXPECT_LT(last, first - 2.0) << first << " -> " << last;
}

TEST(Cuda, CheckpointFromGpuResumesOnCpu) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  auto cfg = gpu_model();
  Config full;
  full.model = cfg;
  Transformer gpu = build_model(cfg, 9, torch::kCUDA);
  std::vector<NamedParam> ps;
  for (auto& p : gpu->named_parameters()) ps.push_back({p.key(), p.value()});
  TrainConfig t;
  AdamW opt(ps, t);
  for (auto& p : ps) p.param.mutable_grad() = torch::ones_like(p.param);
  opt.step(1e-3);
  std::string dir = keel_test::make_temp_dir("gpu_ckpt");
  TrainState st;
  st.step = 1;
  std::string ckpt = save_training_checkpoint(dir, full, gpu, &opt, st, "");
  Transformer cpu(cfg);
  std::vector<NamedParam> cps;
  for (auto& p : cpu->named_parameters()) cps.push_back({p.key(), p.value()});
  AdamW cpu_opt(cps, t);
  TrainState loaded = load_training_checkpoint(ckpt, cpu, &cpu_opt, nullptr);
  EXPECT_EQ(loaded.step, 1);
  auto tokens = torch::randint(0, cfg.vocab_size, {2, 16}, torch::kInt64);
  torch::NoGradGuard ng;
  auto a = gpu->forward(tokens.to(torch::kCUDA)).cpu(), b = cpu->forward(tokens);
  EXPECT_TRUE(torch::allclose(a, b, 1e-4, 1e-4));
  remove_tree(dir);
}
