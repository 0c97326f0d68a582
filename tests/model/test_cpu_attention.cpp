// keel's causal CPU attention (src/model/cpu_attention.h) against the
// composite it replaces: scores, causal mask, softmax and the weighted sum in
// float64 ATen with autograd, forward and all three gradients. Shapes cover
// a last query block shorter than the block (T not a multiple of 64), more
// keys than one online-softmax step (T > 512), grouped-query heads, strided
// inputs laid out as attention.cpp passes them, and a thread-count-independent
// backward (CPU resume is bit-exact).
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/cpu_attention.h"
#include "model/fused_ops.h"
#include "simd_levels.h"

namespace {

struct Shape {
  int64_t B, H, Hkv, T, D;
};

std::string name(const Shape& s) {
  return "B" + std::to_string(s.B) + " H" + std::to_string(s.H) + " Hkv" + std::to_string(s.Hkv) + " T" +
         std::to_string(s.T) + " D" + std::to_string(s.D);
}

// softmax(scale q k^T, causal) v in float64, K/V head h / (H / Hkv) for query head h.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale) {
  const int64_t group = q.size(1) / k.size(1), T = q.size(2);
  auto kx = k.repeat_interleave(group, 1), vx = v.repeat_interleave(group, 1);
  auto scores = torch::matmul(q, kx.transpose(-2, -1)) * scale;
  auto future = torch::ones({T, T}, torch::kBool).triu(1);
  return torch::matmul(torch::softmax(scores.masked_fill(future, -INFINITY), -1), vx);
}

struct Result {
  torch::Tensor out, dq, dk, dv;
};

// q, k, v [B, heads, T, D] as attention.cpp hands them over: head-dimension
// slices of one fused projection [B, T, (H + 2 Hkv) D], transposed.
Result run_kernel(const torch::Tensor& q64, const torch::Tensor& k64, const torch::Tensor& v64,
                  const torch::Tensor& dout, double scale) {
  const int64_t B = q64.size(0), H = q64.size(1), Hkv = k64.size(1), T = q64.size(2), D = q64.size(3);
  auto fused = torch::cat({q64.transpose(1, 2).reshape({B, T, H * D}), k64.transpose(1, 2).reshape({B, T, Hkv * D}),
                           v64.transpose(1, 2).reshape({B, T, Hkv * D})},
                          -1)
                   .to(torch::kFloat32)
                   .requires_grad_(true);
  auto parts = fused.split_with_sizes({H * D, Hkv * D, Hkv * D}, -1);
  auto q = parts[0].view({B, T, H, D}).transpose(1, 2);
  auto k = parts[1].view({B, T, Hkv, D}).transpose(1, 2);
  auto v = parts[2].view({B, T, Hkv, D}).transpose(1, 2);
  auto out = keel::cpu_causal_attention(q, k, v, scale);
  EXPECT_TRUE(out.defined()) << "the kernel declined a CPU fp32 call";
  if (!out.defined()) return {};
  (out * dout.to(torch::kFloat32)).sum().backward();
  auto g = fused.grad().split_with_sizes({H * D, Hkv * D, Hkv * D}, -1);
  return {out.detach(), g[0].view({B, T, H, D}).transpose(1, 2), g[1].view({B, T, Hkv, D}).transpose(1, 2),
          g[2].view({B, T, Hkv, D}).transpose(1, 2)};
}

// Standard normal float64 q, k, v and an output gradient of shape s.
struct Inputs {
  torch::Tensor q, k, v, dout;
};
Inputs random_inputs(const Shape& s, uint64_t seed) {
  torch::manual_seed(seed);
  auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  return {torch::randn({s.B, s.H, s.T, s.D}, opts), torch::randn({s.B, s.Hkv, s.T, s.D}, opts),
          torch::randn({s.B, s.Hkv, s.T, s.D}, opts), torch::randn({s.B, s.H, s.T, s.D}, opts)};
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got.to(torch::kFloat64) - want).abs().max().item<double>();
  const double scale = want.abs().max().item<double>();
  EXPECT_LE(err, 2e-5 * std::max(1.0, scale)) << what << ": max |error| " << err << " (max |value| " << scale << ")";
}

// Sets whether the forward keeps its probabilities for one scope.
class AttentionProbs {
 public:
  explicit AttentionProbs(keel::CpuAttentionProbs probs) { keel::set_cpu_attention_probs(probs); }
  ~AttentionProbs() { keel::set_cpu_attention_probs(keel::CpuAttentionProbs::kAuto); }
  AttentionProbs(const AttentionProbs&) = delete;
  AttentionProbs& operator=(const AttentionProbs&) = delete;
};

// Sets which GEMM the kernel's blocks run on for one scope.
class AttentionGemm {
 public:
  explicit AttentionGemm(keel::CpuAttentionGemm gemm) { keel::set_cpu_attention_gemm(gemm); }
  ~AttentionGemm() { keel::set_cpu_attention_gemm(keel::CpuAttentionGemm::kAuto); }
};

class CpuAttentionGemms : public ::testing::TestWithParam<keel::CpuAttentionGemm> {};

// At 4 threads: with fewer (batch, K/V head) pairs than threads the
// backward splits a group over tasks (1 x 1 pairs: 2 tasks of 1 head; 1 x 2
// pairs of 3 heads: 3 tasks each), otherwise one task per pair. Both GEMM
// back ends (oneDNN's brgemm where LibTorch has it, and BLAS sgemm), and the
// backward on the probabilities the forward kept (T <= 512) and recomputed.
TEST_P(CpuAttentionGemms, MatchesTheFloat64CompositeForwardAndBackward) {
  const AttentionGemm gemm(GetParam());
  torch::manual_seed(5);
  const int threads = at::get_num_threads();
  at::set_num_threads(4);
  for (const auto probs : {keel::CpuAttentionProbs::kSave, keel::CpuAttentionProbs::kRecompute}) {
    const AttentionProbs keep(probs);
    keel_test::for_each_simd_level([&] {
      for (const Shape& s : {Shape{2, 4, 4, 100, 32}, Shape{2, 8, 2, 130, 64}, Shape{1, 2, 1, 700, 16},
                             Shape{1, 6, 2, 150, 16}, Shape{1, 3, 3, 1, 24}, Shape{3, 6, 3, 64, 8},
                             Shape{1, 4, 1, 1100, 20}, Shape{1, 4, 1, 1088, 20}, Shape{2, 8, 2, 192, 64}}) {
        const bool kept = probs == keel::CpuAttentionProbs::kSave && s.T <= 512;
        const auto what = name(s) + (kept ? ", probabilities kept" : ", recomputed");
        EXPECT_EQ(keel::cpu_causal_attention_saved_probs(s.T) > 0, kept) << what;
        auto opts = torch::TensorOptions().dtype(torch::kFloat64);
        // Rounded to fp32 first so both sides see the same inputs.
        auto q = (torch::randn({s.B, s.H, s.T, s.D}, opts) * 2).to(torch::kFloat32).to(torch::kFloat64);
        auto k = (torch::randn({s.B, s.Hkv, s.T, s.D}, opts) * 2).to(torch::kFloat32).to(torch::kFloat64);
        auto v = torch::randn({s.B, s.Hkv, s.T, s.D}, opts).to(torch::kFloat32).to(torch::kFloat64);
        auto dout = torch::randn({s.B, s.H, s.T, s.D}, opts).to(torch::kFloat32).to(torch::kFloat64);
        const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));

        auto qr = q.clone().requires_grad_(true), kr = k.clone().requires_grad_(true);
        auto vr = v.clone().requires_grad_(true);
        auto want = reference(qr, kr, vr, scale);
        (want * dout).sum().backward();

        const Result got = run_kernel(q, k, v, dout, scale);
        if (!got.out.defined()) continue;
        expect_close(got.out, want.detach(), what + " out");
        expect_close(got.dq, qr.grad(), what + " dq");
        expect_close(got.dk, kr.grad(), what + " dk");
        expect_close(got.dv, vr.grad(), what + " dv");
      }
    });
  }
  at::set_num_threads(threads);
}

INSTANTIATE_TEST_SUITE_P(Gemm, CpuAttentionGemms,
                         ::testing::Values(keel::CpuAttentionGemm::kOneDnn, keel::CpuAttentionGemm::kBlas),
                         [](const ::testing::TestParamInfo<keel::CpuAttentionGemm>& info) {
                           return info.param == keel::CpuAttentionGemm::kBlas ? std::string("Blas")
                                                                              : std::string("OneDnn");
                         });

// The two back ends give the same results up to float rounding. By default
// brgemm serves T a multiple of the query block (64) and sgemm the other
// lengths (brgemm's kernels are cached per shape and leading dimension).
TEST(CpuAttention, BothGemmBackEndsAgreeAndTheDefaultPicksByLength) {
  for (const int64_t T : {320, 300}) {
    const auto what = "T " + std::to_string(T);
    const auto [q, k, v, dout] = random_inputs(Shape{2, 4, 2, T, 32}, 9);
    Result runs[3];
    {
      const AttentionGemm gemm(keel::CpuAttentionGemm::kOneDnn);
      runs[0] = run_kernel(q, k, v, dout, 0.2);
    }
    {
      const AttentionGemm gemm(keel::CpuAttentionGemm::kBlas);
      runs[1] = run_kernel(q, k, v, dout, 0.2);
    }
    runs[2] = run_kernel(q, k, v, dout, 0.2);  // the default
    for (const Result& r : runs) ASSERT_TRUE(r.out.defined()) << what;
    expect_close(runs[1].out, runs[0].out.to(torch::kFloat64), what + " out, BLAS against oneDNN");
    expect_close(runs[1].dq, runs[0].dq.to(torch::kFloat64), what + " dq, BLAS against oneDNN");
    expect_close(runs[1].dk, runs[0].dk.to(torch::kFloat64), what + " dk, BLAS against oneDNN");
    expect_close(runs[1].dv, runs[0].dv.to(torch::kFloat64), what + " dv, BLAS against oneDNN");
    // ATen runs its own gemm behind brgemm without oneDNN or AVX2: then the bits may agree.
    if (at::hasMKLDNN() && __builtin_cpu_supports("avx2"))
      EXPECT_FALSE(torch::equal(runs[0].out, runs[1].out) && torch::equal(runs[0].dk, runs[1].dk))
          << what << ": the two back ends gave the same bits (is brgemm running?)";
#ifdef CPUBLAS_BRGEMM_F32F32F32
    const Result& want = T % 64 == 0 ? runs[0] : runs[1];
#else
    const Result& want = runs[1];
#endif
    if (std::getenv("KEEL_CPU_ATTENTION_GEMM") == nullptr) {  // which overrides the default
      EXPECT_TRUE(torch::equal(runs[2].out, want.out) && torch::equal(runs[2].dk, want.dk))
          << what << ": the default did not pick " << (&want == &runs[0] ? "brgemm" : "sgemm");
      EXPECT_EQ(keel::cpu_causal_attention_gemm(T), &want == &runs[0] ? "brgemm" : "sgemm") << what;
    }
  }
}

// The first query sees only itself: its output is its own value row, and a
// large score range (logits near +-80) must not overflow the online softmax.
TEST(CpuAttention, FirstQueryCopiesItsValueAndLargeScoresStayFinite) {
  torch::manual_seed(6);
  auto q = torch::randn({1, 2, 600, 16}) * 2.5, k = torch::randn({1, 2, 600, 16}) * 2.5;
  auto v = torch::randn({1, 2, 600, 16});
  auto out = keel::cpu_causal_attention(q, k, v, 1.0);
  ASSERT_TRUE(out.defined());
  EXPECT_TRUE(torch::equal(out.select(2, 0), v.select(2, 0)));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  EXPECT_GT((torch::matmul(q, k.transpose(-2, -1)).abs().max().item<float>()), 80.0f) << "scores not large";
  auto want = reference(q.to(torch::kFloat64), k.to(torch::kFloat64), v.to(torch::kFloat64), 1.0);
  expect_close(out, want, "large scores");
}

// The forward keeps its probabilities where one key block holds every key
// (T <= 512), by default: per query head, each 64-row
// query block's rows times the keys it sees. The backward reads them: its results differ from recomputing in
// the last bits, as the forward's normalised probabilities round differently
// from exp(s - lse). KEEL_CPU_ATTENTION_PROBS=recompute keeps none.
TEST(CpuAttention, KeepsTheProbabilitiesWhereOneKeyBlockHoldsEveryKey) {
  if (std::getenv("KEEL_CPU_ATTENTION_PROBS") == nullptr)  // which overrides the default
    EXPECT_GT(keel::cpu_causal_attention_saved_probs(512), 0) << "not kept by default";
  const AttentionProbs save(keel::CpuAttentionProbs::kSave);
  EXPECT_EQ(keel::cpu_causal_attention_saved_probs(64), 64 * 64);
  EXPECT_EQ(keel::cpu_causal_attention_saved_probs(100), 64 * 64 + 36 * 100);
  EXPECT_EQ(keel::cpu_causal_attention_saved_probs(512), 64 * 64 * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8));
  EXPECT_EQ(keel::cpu_causal_attention_saved_probs(513), 0) << "more keys than one key block";
  const auto [q, k, v, dout] = random_inputs(Shape{2, 4, 2, 200, 32}, 11);
  Result kept, recomputed;
  kept = run_kernel(q, k, v, dout, 0.2);
  {
    const AttentionProbs recompute(keel::CpuAttentionProbs::kRecompute);
    EXPECT_EQ(keel::cpu_causal_attention_saved_probs(64), 0);
    recomputed = run_kernel(q, k, v, dout, 0.2);
  }
  ASSERT_TRUE(kept.out.defined() && recomputed.out.defined());
  expect_close(kept.dk, recomputed.dk.to(torch::kFloat64), "dk, kept against recomputed");
  expect_close(kept.dv, recomputed.dv.to(torch::kFloat64), "dv, kept against recomputed");
  EXPECT_FALSE(torch::equal(kept.dk, recomputed.dk) && torch::equal(kept.dv, recomputed.dv))
      << "the same bits: is the backward reading the kept probabilities?";
}

// Run twice at one thread count, the results are equal bit for bit (what CPU
// resume needs). Across thread counts BLAS may order a GEMM's sums
// differently, as it may for every linear layer: there, close.
TEST(CpuAttention, RepeatsBitForBitAtAGivenThreadCount) {
  const auto [q, k, v, dout] = random_inputs(Shape{2, 4, 2, 200, 32}, 7);
  const int threads = at::get_num_threads();
  std::vector<Result> runs;
  for (int n : {1, 1, 3, 3}) {
    at::set_num_threads(n);
    runs.push_back(run_kernel(q, k, v, dout, 0.2));
  }
  at::set_num_threads(threads);
  for (const Result& r : runs) ASSERT_TRUE(r.out.defined());
  for (size_t i : {0, 2}) {
    const std::string what = std::to_string(i == 0 ? 1 : 3) + " threads";
    EXPECT_TRUE(torch::equal(runs[i].out, runs[i + 1].out)) << what;
    EXPECT_TRUE(torch::equal(runs[i].dq, runs[i + 1].dq)) << what;
    EXPECT_TRUE(torch::equal(runs[i].dk, runs[i + 1].dk)) << what;
    EXPECT_TRUE(torch::equal(runs[i].dv, runs[i + 1].dv)) << what;
  }
  expect_close(runs[2].out, runs[0].out.to(torch::kFloat64), "out, 3 threads against 1");
  expect_close(runs[2].dk, runs[0].dk.to(torch::kFloat64), "dk, 3 threads against 1");
}

TEST(CpuAttention, DeclinesWhatItDoesNotServe) {
  auto q = torch::randn({1, 2, 8, 16}), kv = torch::randn({1, 1, 8, 16});
  EXPECT_FALSE(keel::cpu_causal_attention(q.to(torch::kBFloat16), kv.to(torch::kBFloat16), kv.to(torch::kBFloat16), 1.0)
                   .defined());
  EXPECT_FALSE(
      keel::cpu_causal_attention(q.to(torch::kFloat64), kv.to(torch::kFloat64), kv.to(torch::kFloat64), 1.0).defined());
  EXPECT_FALSE(keel::cpu_causal_attention(q, torch::randn({1, 3, 8, 16}), torch::randn({1, 3, 8, 16}), 1.0).defined())
      << "3 K/V heads cannot serve 2 query heads";
  {
    keel::CompositeOnly composite;  // what CUDA runs: SDPA
    EXPECT_FALSE(keel::cpu_causal_attention(q, kv, kv, 1.0).defined());
  }
  keel::allow_cpu_causal_attention(false);  // train.attention_backend: flash or math
  EXPECT_FALSE(keel::cpu_causal_attention(q, kv, kv, 1.0).defined());
  keel::allow_cpu_causal_attention(true);
  EXPECT_TRUE(keel::cpu_causal_attention(q, kv, kv, 1.0).defined());
}

// The attention layer takes the kernel for fp32 on the CPU and says so; its
// output and gradients match the layer on SDPA (a CompositeOnly guard).
TEST(CpuAttention, TheAttentionLayerRunsItAndMatchesSdpa) {
  torch::manual_seed(8);
  keel::ModelConfig cfg;
  cfg.d_model = 64;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.max_seq_len = 96;
  keel::Attention attn(cfg);
  for (auto& p : attn->parameters()) torch::nn::init::normal_(p, 0.0, 0.1);
  EXPECT_EQ(attn->kernel_name(2, 96, torch::kCPU, torch::kFloat32),
            "keel causal (CPU, " + keel::cpu_causal_attention_gemm(96) +
                (keel::cpu_causal_attention_saved_probs(96) > 0 ? ", probabilities kept)" : ")"));
  auto rope = keel::make_rope_tables(cfg.max_seq_len, cfg.head_dim(), cfg.rope_theta, torch::kCPU);
  auto x = torch::randn({2, 96, 64});
  auto run = [&](bool composite) {
    std::unique_ptr<keel::CompositeOnly> guard;
    if (composite) guard = std::make_unique<keel::CompositeOnly>();
    attn->zero_grad();
    auto xr = x.clone().requires_grad_(true);
    auto y = attn->forward(xr, rope);
    y.pow(2).sum().backward();
    return std::make_pair(y.detach(), xr.grad());
  };
  {
    keel::CompositeOnly composite;
    EXPECT_EQ(attn->kernel_name(2, 96, torch::kCPU, torch::kFloat32).rfind("keel causal", 0), std::string::npos);
  }
  auto [y_kernel, dx_kernel] = run(false);
  auto wq_grad = attn->wq.grad().clone();
  auto [y_sdpa, dx_sdpa] = run(true);
  EXPECT_TRUE(torch::allclose(y_kernel, y_sdpa, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(dx_kernel, dx_sdpa, 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(wq_grad, attn->wq.grad(), 1e-4, 1e-5));
}

}  // namespace
