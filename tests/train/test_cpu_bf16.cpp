// bf16 autocast on the CPU (train.precision: bf16), the mixed-precision path
// CUDA runs, testable without a GPU: matmuls in bf16; the loss, its softmax,
// the norms, clipping and AdamW on fp32 master weights in fp32. One step
// matches the fp32 step within bf16 tolerance, and training still learns.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "model/chunked_loss.h"
#include "model/fused_ops.h"
#include "model/init.h"
#include "train/device.h"
#include "optim/optimizer.h"
#include "train/step_runner.h"
#include "util/host.h"

using namespace keel;

namespace {

Config small_config() {
  Config c;
  c.model.vocab_size = 300;
  c.model.max_seq_len = 32;
  c.model.d_model = 64;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.qk_norm.type = NormKind::rms;
  c.train.device = DeviceChoice::cpu;
  c.train.lr = 1e-3;
  c.train.grad_clip = 1.0;
  c.train.z_loss = 1e-4;
  return c;
}

ComputeSetup cpu(bool bf16) {
  ComputeSetup s;
  s.device = torch::kCPU;
  s.bf16_autocast = bf16;
  return s;
}

Batch batch(int64_t seed, int64_t rows = 4, int64_t T = 32) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  auto tokens = at::randint(0, 300, {rows, T + 1}, gen, torch::TensorOptions().dtype(torch::kLong));
  return {tokens.narrow(1, 0, T).contiguous(), tokens.narrow(1, 1, T).contiguous()};
}

std::vector<NamedParam> named(Transformer& m) {
  std::vector<NamedParam> ps;
  for (auto& p : m->named_parameters()) ps.push_back({p.key(), p.value()});
  return ps;
}

}  // namespace

TEST(CpuBf16, PrecisionKeyTurnsCpuAutocastOnOnlyWhenAsked) {
  TrainConfig t;
  t.device = DeviceChoice::cpu;
  t.threads = 1;
  t.precision = Precision::bf16;
  EXPECT_TRUE(setup_compute(t).bf16_autocast);
  t.precision = Precision::automatic;  // auto stays fp32 on the CPU
  EXPECT_FALSE(setup_compute(t).bf16_autocast);
  t.precision = Precision::fp32;
  EXPECT_FALSE(setup_compute(t).bf16_autocast);
}

TEST(CpuBf16, MatmulsRunInBf16AndTheLossInFp32) {
  Config c = small_config();
  Transformer model = build_model(c.model, 3);
  Batch b = batch(1);
  LossParts loss;
  {
    AutocastScope autocast(true, torch::kCPU);
    EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU));
    auto logits = model->forward(b.inputs);
    EXPECT_EQ(logits.scalar_type(), torch::kBFloat16) << "the output head should run in bf16";
    loss = language_model_loss(logits, b.targets, 1e-4);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU)) << "the scope must turn autocast off again";
  EXPECT_EQ(loss.ce.scalar_type(), torch::kFloat32);
  EXPECT_EQ(loss.z.scalar_type(), torch::kFloat32);
  loss.total.backward();
  for (auto& p : model->named_parameters()) {
    EXPECT_EQ(p.value().scalar_type(), torch::kFloat32) << p.key() << ": master weights stay fp32";
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_EQ(p.value().grad().scalar_type(), torch::kFloat32) << p.key();
  }
}

// train.fp32_head (issue 51): under autocast the head's matmul in fp32, on
// both the whole-logits path and the chunked loss; without it, bf16.
TEST(CpuBf16, Fp32HeadKeepsTheHeadMatmulInFp32) {
  Config c = small_config();
  Transformer model = build_model(c.model, 3);
  Batch b = batch(1);
  AutocastScope autocast(true, torch::kCPU);
  torch::NoGradGuard no_grad;
  auto hidden = model->forward_hidden(b.inputs);
  torch::Tensor exact;
  {
    AutocastOff off(torch::kCPU);  // what an fp32 head gives
    exact = torch::matmul(hidden.to(torch::kFloat32), model->lm_head.t());
  }
  const int64_t V = c.model.vocab_size;  // the padded columns are -inf in the model's logits
  exact.narrow(-1, V, exact.size(-1) - V).fill_(-std::numeric_limits<float>::infinity());
  auto real = [&](const torch::Tensor& t) { return t.narrow(-1, 0, V).to(torch::kFloat32); };
  const double big = real(exact).abs().max().item<double>();
  auto bf16 = model->forward(b.inputs);
  model->set_fp32_head(true);
  auto fp32 = model->forward(b.inputs);
  EXPECT_TRUE(at::autocast::is_autocast_enabled(at::kCPU)) << "the head must turn autocast back on";
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(fp32.scalar_type(), torch::kFloat32);
  EXPECT_LT((real(fp32) - real(exact)).abs().max().item<double>(), 1e-5 * big);
  EXPECT_GT((real(bf16) - real(exact)).abs().max().item<double>(), 1e-3 * big) << "bf16 rounds visibly";
  // The chunked loss the trainer uses: its head in fp32 too.
  const double want = language_model_loss(exact, b.targets, 1e-4).total.item<double>();
  const double got = model_loss(*model, b.inputs, b.targets, 1e-4, 64).total.item<double>();
  EXPECT_NEAR(got, want, 1e-5);
  model->set_fp32_head(false);
  const double rounded = model_loss(*model, b.inputs, b.targets, 1e-4, 64).total.item<double>();
  EXPECT_GT(std::abs(rounded - want), 1e-5) << "the bf16 head's loss should differ";
}

// On a CPU without bf16 hardware keel emulates bf16 GEMMs with fp32 GEMMs of
// the rounded operands (fused_ops.h, 13x faster there). Its logits and
// gradients must be bf16's, not fp32's: next to ATen's own bf16 kernels they
// differ by a small fraction of what separates bf16 from fp32.
TEST(CpuBf16, EmulatedBf16GemmsGiveBf16sNumbers) {
  Config c = small_config();
  c.model.attn_softcap = 30.0;  // the blockwise path's matmuls too
  Batch b = batch(2);
  auto run = [&](int mode) {  // 0 native bf16, 1 emulated bf16, 2 fp32
    Transformer model = build_model(c.model, 3);
    if (mode < 2) set_cpu_bf16_gemm_emulated(mode == 1);
    AutocastScope autocast(mode < 2, torch::kCPU);
    auto loss = model_loss(*model, b.inputs, b.targets, 1e-4, 64);
    loss.total.backward();
    std::vector<torch::Tensor> out = {loss.total.detach().reshape({1})};
    for (auto& p : model->named_parameters()) out.push_back(p.value().grad().reshape({-1}));
    reset_cpu_bf16_gemm_emulated();
    return torch::cat(out);
  };
  const auto native = run(0), emulated = run(1), fp32 = run(2);
  // L2 over the loss and every gradient: a GEMM's sums in another order
  // flip a bf16 rounding only here and there, bf16 against fp32 everywhere.
  const double bf16_vs_fp32 = (native - fp32).norm().item<double>();
  const double emulated_vs_native = (emulated - native).norm().item<double>();
  EXPECT_GT(bf16_vs_fp32, 0.0);
  EXPECT_LT(emulated_vs_native, 0.5 * bf16_vs_fp32) << "emulated " << emulated_vs_native << ", bf16 vs fp32 "
                                                      << bf16_vs_fp32;
  EXPECT_GT((emulated - fp32).norm().item<double>(), 0.5 * bf16_vs_fp32) << "the emulation rounded nothing";
}

// The default follows the CPU's flags as util/host.h reads them: native bf16
// GEMMs where AVX-512 BF16 or AMX is there, emulated elsewhere.
TEST(CpuBf16, EmulationDefaultFollowsTheCpuFlags) {
  if (std::getenv("KEEL_CPU_BF16_GEMM")) GTEST_SKIP() << "KEEL_CPU_BF16_GEMM overrides the default";
  reset_cpu_bf16_gemm_emulated();
  const std::string isa = " " + cpu_isa() + " ";
  const bool hardware = isa.find(" avx512_bf16 ") != std::string::npos || isa.find(" amx_bf16 ") != std::string::npos;
  EXPECT_EQ(cpu_bf16_gemm_emulated(), !hardware) << "flags: " << cpu_isa();
}

// One emulated linear against ATen's bf16 one: the same bf16 outputs but for
// a rounding flipped here and there by the order of the sums (at most one
// bf16 step), where fp32's outputs differ almost everywhere.
TEST(CpuBf16, AnEmulatedLinearIsABf16Linear) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  auto x = at::randn({64, 96}, gen), w = at::randn({80, 96}, gen), bias = at::randn({80}, gen);
  torch::Tensor native, emulated, fp32;
  {
    AutocastScope autocast(true, torch::kCPU);
    set_cpu_bf16_gemm_emulated(false);
    native = keel::linear(x, w, bias);
    set_cpu_bf16_gemm_emulated(true);
    emulated = keel::linear(x, w, bias);
    reset_cpu_bf16_gemm_emulated();
  }
  fp32 = keel::linear(x, w, bias);
  ASSERT_EQ(native.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(emulated.scalar_type(), torch::kBFloat16);
  const double same = native.eq(emulated).to(torch::kFloat64).mean().item<double>();
  const double same_fp32 = native.to(torch::kFloat32).eq(fp32).to(torch::kFloat64).mean().item<double>();
  EXPECT_GT(same, 0.9) << "bitwise-equal outputs";
  EXPECT_LT(same_fp32, 0.1);
  auto ulp = native.to(torch::kFloat32).abs() * std::ldexp(1.0, -7);  // one bf16 step (8 significant bits)
  EXPECT_TRUE((native.to(torch::kFloat32) - emulated.to(torch::kFloat32)).abs().le(ulp + 1e-30).all().item<bool>());
}

// The StepRunner step (forward, fp32 loss, backward, clipping, AdamW) in bf16
// against the same step in fp32 on the same weights and batch.
TEST(CpuBf16, OneStepMatchesFp32WithinBf16Tolerance) {
  Config c = small_config();
  Transformer a = build_model(c.model, 11), b = build_model(c.model, 11);
  AdamW opt_a(named(a), c.train), opt_b(named(b), c.train);
  StepRunner fp32(a, opt_a, c, cpu(false), 2), bf16(b, opt_b, c, cpu(true), 2);
  std::vector<torch::Tensor> before;
  for (auto& p : named(a)) before.push_back(p.param.detach().clone());
  Batch data = batch(5);
  StepResult ra, rb;
  for (auto* run : {&fp32, &bf16}) {
    StepResult& r = run == &fp32 ? ra : rb;
    (run == &fp32 ? opt_a : opt_b).zero_grad();
    run->begin_step();
    r.loss = run->forward_backward(run->to_device(data));
    r.clip = run->clip(r.loss.ce);
    run->update(c.train.lr, r.clip.found_inf);
  }
  const double la = ra.loss.ce.item<double>(), lb = rb.loss.ce.item<double>();
  EXPECT_NE(la, lb) << "bf16 autocast changed nothing: the matmuls did not run in bf16";
  EXPECT_NEAR(la, lb, 1e-2 * la);
  const double ga = ra.clip.grad_norm.item<double>(), gb = rb.clip.grad_norm.item<double>();
  EXPECT_EQ(rb.clip.grad_norm.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(ga, gb, 5e-2 * ga);
  EXPECT_EQ(rb.clip.found_inf.item<double>(), 0.0);
  // AdamW's first update is about lr * sign(g): compare the updates, which
  // may differ only where a gradient is near zero.
  auto pa = named(a), pb = named(b);
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pb[i].param.scalar_type(), torch::kFloat32) << pa[i].name;
    auto da = pa[i].param.detach() - before[i], db = pb[i].param.detach() - before[i];
    const double scale = da.abs().mean().item<double>();
    ASSERT_GT(scale, 0) << pa[i].name << " was not updated";
    EXPECT_LT((da - db).abs().mean().item<double>(), 0.15 * scale) << pa[i].name;
  }
}

TEST(CpuBf16, TrainingLearnsUnderAutocast) {
  Config c = small_config();
  c.train.lr = 3e-3;
  Transformer m = build_model(c.model, 2);
  AdamW opt(named(m), c.train);
  StepRunner runner(m, opt, c, cpu(true), 4);
  Batch data = batch(9, 8, 32);  // one batch, learned by heart
  double first = 0, last = 0;
  for (int s = 0; s < 40; ++s) {
    opt.zero_grad();
    runner.begin_step();
    auto loss = runner.forward_backward(runner.to_device(data));
    auto clip = runner.clip(loss.ce);
    runner.update(c.train.lr, clip.found_inf);
    if (s == 0) first = loss.ce.item<double>();
    last = loss.ce.item<double>();
  }
  EXPECT_LT(last, first - 1.0) << first << " -> " << last;
}

// ---------------------------------------------------------------------------
// The blockwise attention (softcap, clamp, QK-clip's head maxima) under bf16
// autocast, for every QK-Norm type. L2 and LayerNorm QK-Norm hand it fp32 q
// and k beside a bf16 v; it must cast them as autocast casts SDPA's inputs
// (issue 30, defect 1: the backward's dO.V^T matmul failed on the dtypes).
// Gradients match the fp32 model's within bf16 error.
namespace {

enum class ScoreModifier { softcap, clamp, qk_clip };

const char* modifier_name(ScoreModifier m) {
  return m == ScoreModifier::softcap ? "softcap" : m == ScoreModifier::clamp ? "clamp" : "qk_clip";
}

Config blockwise_config(NormKind qk, ScoreModifier m) {
  Config c = small_config();
  c.model.qk_norm.type = qk;
  if (m == ScoreModifier::softcap) c.model.attn_softcap = 20.0;
  if (m == ScoreModifier::clamp) c.model.attn_logit_clamp = 8.0;
  return c;
}

// One forward and backward of `model` on `data`; the gradients by name.
std::map<std::string, torch::Tensor> gradients(Transformer& model, const Batch& data, bool bf16, bool track_head_max) {
  for (const auto& b : *model->blocks) b->as<BlockImpl>()->attn->track_head_max = track_head_max;
  model->zero_grad();
  LossParts loss;
  {
    AutocastScope autocast(bf16, torch::kCPU);
    loss = language_model_loss(model->forward(data.inputs), data.targets, 0.0);
  }
  loss.total.backward();
  std::map<std::string, torch::Tensor> g;
  for (auto& p : model->named_parameters())
    if (p.value().grad().defined()) g[p.key()] = p.value().grad().clone();
  return g;
}

}  // namespace

TEST(CpuBf16, BlockwiseAttentionGradientsMatchFp32ForEveryQkNormAndModifier) {
  const Batch data = batch(21);
  for (NormKind qk : {NormKind::none, NormKind::rms, NormKind::layernorm, NormKind::l2}) {
    for (ScoreModifier m : {ScoreModifier::softcap, ScoreModifier::clamp, ScoreModifier::qk_clip}) {
      SCOPED_TRACE(name_of(qk) + " x " + modifier_name(m));
      const Config c = blockwise_config(qk, m);
      Transformer model = build_model(c.model, 5);
      const bool track = m == ScoreModifier::qk_clip;  // QK-clip's head maxima take the blockwise path
      model->blocks[0]->as<BlockImpl>()->attn->track_head_max = track;
      ASSERT_EQ(model->blocks[0]->as<BlockImpl>()->attn->kernel_name(4, 32, torch::kCPU, torch::kFloat32),
                "blockwise")
          << "the test means the blockwise path";
      const auto fp32 = gradients(model, data, false, track);
      std::map<std::string, torch::Tensor> bf16;
      ASSERT_NO_THROW(bf16 = gradients(model, data, true, track));
      ASSERT_EQ(bf16.size(), fp32.size());
      // bf16's error is relative to the terms a gradient sums, not to the
      // sum: a gradient that nearly cancels (the L2 temperature's, about
      // 1e-5 here, off by a third under SDPA too) is held to an absolute
      // bound, a thousandth of the whole gradient's norm.
      double global = 0;
      for (const auto& [name, g] : fp32) global += g.pow(2).sum().item<double>();
      global = std::sqrt(global);
      for (const auto& [name, g] : fp32) {
        const auto& h = bf16.at(name);
        EXPECT_EQ(h.scalar_type(), torch::kFloat32) << name;
        const double ref = g.norm().item<double>(), err = (h - g).norm().item<double>();
        EXPECT_LT(err, 0.1 * ref + 1e-3 * global)
            << name << ": |g_bf16 - g_fp32| = " << err << ", |g_fp32| = " << ref << ", whole gradient " << global;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Every bf16 step runs its norms on the fused kernels: no warning from
// LibTorch in any layout x QK-Norm x softcap x optimizer. A bf16 input with
// fp32 gains sent at::rms_norm to its composite with a "Mismatch dtype"
// warning (issue 30, defect 4): RMS QK-Norm in every layout, and the block
// norms of the reordered and sandwich layouts, which normalise a bf16
// sublayer output. Warnings are collected (every time, not once per
// process) and any one fails the combination.
namespace {

class CollectWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& w) override { seen.push_back(w.msg()); }
  std::vector<std::string> seen;
};

}  // namespace

TEST(CpuBf16, NoCombinationOfLayoutQkNormSoftcapAndOptimizerWarns) {
  const bool warn_always = c10::WarningUtils::get_warnAlways();
  c10::WarningUtils::set_warnAlways(true);  // TORCH_WARN_ONCE fires every time
  const Batch data = batch(31);
  int combinations = 0;
  for (NormPlacement layout : {NormPlacement::pre, NormPlacement::post, NormPlacement::reordered,
                               NormPlacement::sandwich}) {
    for (NormKind qk : {NormKind::none, NormKind::rms, NormKind::layernorm, NormKind::l2}) {
      for (bool softcap : {false, true}) {
        for (OptimizerKind opt_kind : {OptimizerKind::adamw, OptimizerKind::muon}) {
          const std::string label = name_of(layout) + " x qk " + name_of(qk) + (softcap ? " x softcap" : "") +
                                    " x " + name_of(opt_kind);
          SCOPED_TRACE(label);
          Config c = small_config();
          c.model.norm_placement = layout;
          c.model.qk_norm.type = qk;
          if (softcap) c.model.attn_softcap = 20.0;
          c.train.optimizer = opt_kind;
          Transformer model = build_model(c.model, 7);
          auto opt = make_optimizer(named(model), c.train, c.model.head_dim());
          StepRunner runner(model, *opt, c, cpu(true), 2);
          CollectWarnings warnings;
          double loss = 0;
          {
            c10::WarningUtils::WarningHandlerGuard guard(&warnings);
            opt->zero_grad();
            runner.begin_step();
            auto l = runner.forward_backward(runner.to_device(data));
            auto clip = runner.clip(l.ce);
            runner.update(c.train.lr, clip.found_inf);
            loss = l.ce.item<double>();
          }
          EXPECT_TRUE(std::isfinite(loss));
          for (const auto& w : warnings.seen) ADD_FAILURE() << label << " warned: " << w;
          ++combinations;
        }
      }
    }
  }
  c10::WarningUtils::set_warnAlways(warn_always);
  EXPECT_EQ(combinations, 64);
}
