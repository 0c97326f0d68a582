// GPU checks (CTest label "gpu"); each test skips cleanly without CUDA.
// Run on a GPU machine by scripts/gpu/gpu_check.sh.
#include <gtest/gtest.h>

#include <c10/cuda/CUDAFunctions.h>

#include <fstream>
#include <functional>

#include "data/loader.h"
#include "data/prepare.h"
#include "model/attention.h"
#include "model/blockwise_attention.h"
#include "model/chunked_loss.h"
#include "model/documents.h"
#include "model/fused_cuda.h"
#include "model/fused_ops.h"
#include "model/init.h"
#include "model/rope.h"
#include "test_util.h"
#include "train/device.h"
#include "optim/grad_norms.h"
#include "optim/optimizer.h"
#include "train/step_runner.h"
#include "train/train_state.h"
#include "util/fs.h"

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
  m.qk_norm.type = NormKind::rms;
  return m;
}

// The trainer's settings for a StepRunner on CUDA: bf16 autocast, fused
// AdamW, clipping, z-loss; batches of 8 sequences in 2 micro-batches.
Config runner_config(bool cuda_graph) {
  Config c;
  c.model = gpu_model();
  c.train.lr = 3e-3;
  c.train.grad_clip = 1.0;
  c.train.z_loss = 1e-4;
  c.train.cuda_graph = cuda_graph;
  return c;
}

ComputeSetup cuda_compute() {
  ComputeSetup s;
  s.device = torch::Device(torch::kCUDA, 0);
  s.bf16_autocast = true;
  return s;
}

Batch pinned_batch(int64_t seed, int64_t rows = 8, int64_t T = 64) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  auto tokens = at::randint(0, 300, {rows, T + 1}, gen, torch::TensorOptions().dtype(torch::kLong)).pin_memory();
  return {tokens.narrow(1, 0, T).contiguous().pin_memory(), tokens.narrow(1, 1, T).contiguous().pin_memory()};
}

std::vector<NamedParam> named(Transformer& m) {
  std::vector<NamedParam> ps;
  for (auto& p : m->named_parameters()) ps.push_back({p.key(), p.value()});
  return ps;
}

}  // namespace

// train.cuda_graph: 3 eager warm-up steps, one capture, replays. The losses,
// gradient norms and weights must follow the eager runner's step by step:
// the same kernels on the same inputs, replayed.
TEST(Cuda, CudaGraphStepsEqualEagerSteps) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  Config eager_cfg = runner_config(false), graph_cfg = runner_config(true);
  const auto compute = cuda_compute();
  Transformer a = build_model(eager_cfg.model, 21, compute.device), b = build_model(graph_cfg.model, 21, compute.device);
  AdamW opt_a(named(a), eager_cfg.train), opt_b(named(b), graph_cfg.train);
  StepRunner eager(a, opt_a, eager_cfg, compute, 4), graphed(b, opt_b, graph_cfg, compute, 4);
  ASSERT_TRUE(graphed.graph_mode());
  int64_t first_stream = -1;
  for (int64_t step = 0; step < 8; ++step) {
    const double lr = 3e-3 * (step + 1) / 8.0;  // a changing LR: the graph reads it from the device
    Batch batch = pinned_batch(step);
    opt_a.zero_grad();
    eager.begin_step();
    StepResult ra;
    ra.loss = eager.forward_backward(eager.to_device(batch));
    ra.clip = eager.clip(ra.loss.ce);
    eager.update(lr, ra.clip.found_inf);
    StepResult rb = graphed.graphed_step(graphed.to_device(batch), lr);
    EXPECT_EQ(graphed.captured(), step >= kGraphWarmupSteps) << "step " << step;
    // Warm-up and capture share one side stream (a fresh stream per warm-up
    // step left the allocator holding each step's peak separately).
    if (step == 0) first_stream = graphed.graph_stream_id();
    EXPECT_EQ(graphed.graph_stream_id(), first_stream) << "step " << step;
    const double la = ra.loss.ce.item<double>(), lb = rb.loss.ce.item<double>();
    EXPECT_NEAR(la, lb, 1e-4 * std::abs(la)) << "loss at step " << step;
    EXPECT_NEAR(ra.clip.grad_norm.item<double>(), rb.clip.grad_norm.item<double>(),
                1e-3 * ra.clip.grad_norm.item<double>())
        << "grad norm at step " << step;
  }
  auto pa = named(a), pb = named(b);
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_TRUE(torch::allclose(pa[i].param, pb[i].param, 1e-3, 1e-5)) << pa[i].name;
}

// "No host synchronisation in a step except on logging steps": with CUDA's
// sync debug mode set to error, any synchronising call inside the step's
// device work (an .item(), a blocking copy) throws.
TEST(Cuda, EagerStepDoesNotSynchronise) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  Config cfg = runner_config(false);
  const auto compute = cuda_compute();
  Transformer m = build_model(cfg.model, 4, compute.device);
  AdamW opt(named(m), cfg.train);
  StepRunner runner(m, opt, cfg, compute, 4);
  auto run_step = [&](int64_t step) {
    Batch batch = pinned_batch(step);
    opt.zero_grad();
    runner.begin_step();
    auto loss = runner.forward_backward(runner.to_device(batch));
    auto clip = runner.clip(loss.ce);
    runner.update(1e-3, clip.found_inf);
  };
  run_step(0);  // first-use initialisation (cuBLAS handles, allocator) may synchronise
  torch::cuda::synchronize();
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  EXPECT_NO_THROW(run_step(1));
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  torch::cuda::synchronize();
}

// The loader builds batches in page-locked memory once asked (the trainer
// asks on CUDA), including those its prefetch thread makes.
TEST(Cuda, LoaderBatchesArePinnedOnRequest) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = keel_test::make_temp_dir("gpu_pinned");
  {
    std::ofstream(dir + "/corpus.txt") << keel_test::make_sentence_corpus(5, 300);
  }
  Config c;
  c.model.vocab_size = 320;
  c.data.dir = dir + "/data";
  c.data.sources = {dir + "/corpus.txt"};
  c.data.doc_separator = "%";
  ensure_prepared(c);
  BatchLoader loader(c.data.dir, "train", 16, 4, 0, 1, 1, /*prefetch=*/2);
  EXPECT_FALSE(loader.get(0).inputs.is_pinned());
  loader.set_pinned(true);
  for (int64_t step = 1; step < 5; ++step) {  // steps 1-2 may come from the prefetch queue made before
    Batch b = loader.get(step);
    if (step >= 4) {
      EXPECT_TRUE(b.inputs.is_pinned()) << "step " << step;
      EXPECT_TRUE(b.targets.is_pinned()) << "step " << step;
    }
  }
  remove_tree(dir);
}

TEST(Cuda, FlashSdpaWithNativeGqaMatchesExplicitPath) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(0);
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto q = torch::randn({2, 8, 128, 64}, opts), k = torch::randn({2, 2, 128, 64}, opts),
       v = torch::randn({2, 2, 128, 64}, opts);
  // With the math backend disabled an ineligible call throws (docs/papers.md#libtorch-notes):
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

// keel's RoPE kernel (src/model/cuda/rope_kernel.cu) against apply_rope's
// composite on the same GPU: bit for bit forward and backward in fp32, bf16
// and fp16, on the strided q view of a fused qkv projection.
// tests/model/test_rope_element.cpp runs the same per-element code on the CPU.
TEST(Cuda, FusedRopeEqualsCompositeBitForBit) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!fused_cuda_kernels_built()) GTEST_SKIP() << "this build has no CUDA kernels of keel's";
  auto tables = make_rope_tables(256, 64, 10000.0, torch::kCUDA);
  torch::manual_seed(5);
  set_fused_cuda_kernels(true);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    const std::string what = c10::toString(dtype);
    auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
    auto qkv = torch::randn({4, 200, 3 * 6, 64}, opts) * 3;  // T 200 of a 256-row table
    auto dy = torch::randn({4, 200, 6, 64}, opts);
    auto run = [&](bool fused) {
      auto x = qkv.narrow(2, 6, 6).detach().requires_grad_(true);
      torch::Tensor y;
      if (fused) {
        y = fused_cuda_rope(x, tables.cos, tables.sin);
        EXPECT_TRUE(y.defined()) << what << ": the kernel declined";
        if (!y.defined()) return std::make_pair(torch::Tensor(), torch::Tensor());
      } else {
        CompositeOnly composite;
        y = apply_rope(x, tables);
      }
      y.backward(dy);
      return std::make_pair(y.detach(), x.grad());
    };
    auto [y, dx] = run(true);
    auto [y_ref, dx_ref] = run(false);
    if (!y.defined()) continue;
    EXPECT_TRUE(torch::equal(y, y_ref)) << what << " forward";
    EXPECT_TRUE(torch::equal(dx, dx_ref)) << what << " backward";
    // apply_rope takes the kernel when it is switched on.
    EXPECT_TRUE(torch::equal(apply_rope(qkv.narrow(2, 6, 6), tables), y_ref)) << what;
  }
  reset_fused_cuda_kernels();
}

// keel's softmax / cross-entropy kernel (src/model/cuda/xent_kernel.cu)
// inside the chunked loss against the composite on the same GPU: loss parts
// and the gradients of hidden states and head, fp32 and bf16 compute, with
// and without the softcap, a padded vocabulary, chunks that do not divide N.
// tests/model/test_xent_row.cpp runs the kernel's code on the CPU.
TEST(Cuda, FusedSoftmaxXentEqualsTheCompositeChunkedLoss) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  if (!fused_cuda_kernels_built()) GTEST_SKIP() << "this build has no CUDA kernels of keel's";
  torch::manual_seed(6);
  const int64_t N = 300, C = 64, V = 1000, padded = 1024;
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  auto hidden0 = torch::randn({N, C}, opts), head0 = torch::randn({padded, C}, opts) * 0.3;
  auto targets = torch::randint(0, V, {N}, opts.dtype(torch::kLong));
  for (auto compute : {torch::kFloat32, torch::kBFloat16}) {
    for (double cap : {0.0, 30.0}) {
      HeadLossOptions o;
      o.chunk_tokens = 128;
      o.vocab_size = V;
      o.z_loss_coef = 1e-4;
      if (cap > 0) o.final_softcap = cap;
      if (compute != torch::kFloat32) o.compute_dtype = compute;
      const std::string what = std::string(c10::toString(compute)) + " cap " + std::to_string(cap);
      auto run = [&](bool fused) {
        auto hidden = hidden0.clone().requires_grad_(true), head = head0.clone().requires_grad_(true);
        set_fused_cuda_kernels(fused);
        auto parts = chunked_head_loss(hidden, head, targets, o);
        parts.total.backward();
        reset_fused_cuda_kernels();
        return std::vector<torch::Tensor>{parts.total.detach(), parts.ce.detach(), parts.z.detach(), hidden.grad(),
                                          head.grad()};
      };
      auto got = run(true), ref = run(false);
      const double tol = compute == torch::kFloat32 ? 1e-5 : 1e-2;
      const char* names[] = {"total", "ce", "z", "d hidden", "d head"};
      for (int i = 0; i < 5; ++i) {
        const double err = ((got[i] - ref[i]).norm() / (ref[i].norm() + 1e-12)).item<double>();
        EXPECT_LT(err, tol) << what << " " << names[i];
      }
    }
  }
}

// The blockwise attention (softcap, clamp, QK-clip, statistics) runs its
// ATen blocks on CUDA: fp32 equals the CPU's, bf16 stays within bf16 error,
// gradients included.
TEST(Cuda, BlockwiseAttentionEqualsTheCpusWithSoftcap) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(3);
  auto q = torch::randn({2, 8, 300, 64}) * 2, k = torch::randn({2, 2, 300, 64}) * 2, v = torch::randn({2, 2, 300, 64});
  auto dy = torch::randn({2, 8, 300, 64});
  keel::BlockwiseOptions o;
  o.scale = 0.125;
  o.softcap = 50.0;
  o.head_max = true;
  auto grads = [&](const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0) {
    auto qq = q0.clone().requires_grad_(true), kk = k0.clone().requires_grad_(true), vv = v0.clone().requires_grad_(true);
    auto r = keel::blockwise_attention(qq, kk, vv, o);
    r.out.backward(dy.to(q0.device()).to(q0.scalar_type()));
    return std::vector<torch::Tensor>{r.out.detach().to(torch::kCPU).to(torch::kFloat32),
                                      qq.grad().to(torch::kCPU).to(torch::kFloat32), r.head_max.to(torch::kCPU)};
  };
  auto cpu = grads(q, k, v);
  auto gpu = grads(q.cuda(), k.cuda(), v.cuda());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_LT((cpu[i] - gpu[i]).abs().max().item<double>(), 1e-3) << i;
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto bf = grads(q.to(opts), k.to(opts), v.to(opts));
  EXPECT_LT(((bf[0] - cpu[0]).norm() / cpu[0].norm()).item<double>(), 2e-2);
  EXPECT_LT(((bf[1] - cpu[1]).norm() / cpu[1].norm()).item<double>(), 5e-2);
}

// data.document_mask on CUDA: SDPA with the block-diagonal mask, the
// blockwise path and the varlen flash kernel (KEEL_DOCUMENT_VARLEN=1) all
// equal each document computed alone, outputs and gradients, in bf16.
TEST(Cuda, DocumentMaskedAttentionEqualsEachDocumentAlone) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  torch::manual_seed(4);
  const std::vector<std::vector<int64_t>> lengths = {{100, 28, 72, 56}, {256}};
  std::vector<int64_t> ids;
  for (const auto& row : lengths)
    for (size_t d = 0; d < row.size(); ++d) ids.insert(ids.end(), static_cast<size_t>(row[d]), static_cast<int64_t>(d));
  auto seg_host = torch::tensor(ids, torch::kInt64).view({2, 256});
  auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto q = torch::randn({2, 8, 256, 64}, opts), k = torch::randn({2, 2, 256, 64}, opts), v = torch::randn({2, 2, 256, 64}, opts);
  auto dy = torch::randn({2, 8, 256, 64}, opts);
  auto run = [&](const std::function<torch::Tensor(torch::Tensor, torch::Tensor, torch::Tensor)>& f) {
    auto qq = q.clone().requires_grad_(true), kk = k.clone().requires_grad_(true), vv = v.clone().requires_grad_(true);
    auto y = f(qq, kk, vv);
    y.backward(dy);
    return std::vector<torch::Tensor>{y.detach().to(torch::kFloat32), qq.grad().to(torch::kFloat32),
                                      kk.grad().to(torch::kFloat32), vv.grad().to(torch::kFloat32)};
  };
  auto alone = run([&](auto qq, auto kk, auto vv) {  // fp32, one document at a time
    std::vector<torch::Tensor> rows;
    for (size_t b = 0; b < lengths.size(); ++b) {
      std::vector<torch::Tensor> docs;
      int64_t start = 0;
      for (int64_t n : lengths[b]) {
        auto sl = [&](const torch::Tensor& t) { return t.narrow(0, static_cast<int64_t>(b), 1).narrow(2, start, n).to(torch::kFloat32); };
        docs.push_back(explicit_attention(sl(qq), sl(kk), sl(vv), 0.125, c10::nullopt, nullptr));
        start += n;
      }
      rows.push_back(torch::cat(docs, 2));
    }
    return torch::cat(rows, 0);
  });
  auto seg = seg_host.cuda();
  auto sdpa = run([&](auto qq, auto kk, auto vv) {
    return at::scaled_dot_product_attention(qq, kk, vv, document_attention_mask(seg), 0.0, false, 0.125, true);
  });
  auto blockwise = run([&](auto qq, auto kk, auto vv) {
    BlockwiseOptions o;
    o.scale = 0.125;
    o.block_q = o.block_k = 64;
    o.segments = seg;
    o.segments_host = seg_host;
    return blockwise_attention(qq, kk, vv, o).out;
  });
  DocumentLayout layout;
  layout.segments = seg;
  auto varlen = run([&](auto qq, auto kk, auto vv) { return varlen_document_attention(qq, kk, vv, layout, 0.125); });
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (const auto& [name, got] : std::vector<std::pair<std::string, std::vector<torch::Tensor>>>{
           {"sdpa", sdpa}, {"blockwise", blockwise}, {"varlen", varlen}})
    for (size_t i = 0; i < 4; ++i)
      EXPECT_LT(((got[i] - alone[i]).norm() / alone[i].norm()).item<double>(), 3e-2) << name << " " << names[i];
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
  t.optimizer_impl = OptimizerImpl::fused;
  AdamW fused(pa, t);
  t.optimizer_impl = OptimizerImpl::reference;
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
      AutocastScope autocast(true, torch::kCUDA);  // the trainer's scope: clears the weight cache on exit
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

// Under autocast every QK-Norm hands q and k back in bf16, as they came from
// the projection, though CUDA autocast runs LayerNorm and vector norms in
// fp32: fp32 q and k would carry RoPE and the temperature in fp32 to SDPA.
// Values: the fp32 computation, rounded.
TEST(Cuda, QkNormKeepsTheComputeDtypeUnderAutocast) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  for (auto type : {NormKind::rms, NormKind::layernorm, NormKind::l2}) {
    SCOPED_TRACE(static_cast<int>(type));
    auto cfg = gpu_model();
    cfg.qk_norm.type = type;
    Transformer model = build_model(cfg, 1, torch::kCUDA);
    auto* attn = model->blocks[0]->as<Block>()->attn.get();
    torch::manual_seed(4);
    auto q = (torch::randn({2, 64, cfg.n_heads, cfg.head_dim()}, torch::kCUDA) * 3).to(torch::kBFloat16);
    torch::NoGradGuard no_grad;
    const auto want = attn->normalize_qk(q.to(torch::kFloat32), attn->q_norm);
    torch::Tensor got;
    {
      AutocastScope autocast(true, torch::kCUDA);
      got = attn->normalize_qk(q, attn->q_norm);
    }
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
    const double err = (got.to(torch::kFloat32) - want).abs().max().item<double>();
    const double scale = want.abs().max().item<double>();
    EXPECT_LE(err, scale / 128) << "bf16 keeps 8 significant bits";
  }
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
