// chunked_head_loss (train.loss_chunk_tokens): the output head and the loss
// over chunks of tokens equal the whole-logits path (language_model_loss on
// the head's logits) in value and gradients, for every chunk size, with the
// final softcap, the padded-vocabulary mask and z-loss; in fp64 to rounding,
// in fp32 to 1e-5, and through the whole model; and the CPU kernel for a
// chunk's softmax work (fused_cpu_softmax_xent) against the composite that
// CUDA runs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "model/chunked_loss.h"
#include "model/fused_ops.h"
#include "model/fused_xent.h"
#include "train/op_counter.h"
#include "simd_levels.h"
#include "test_model_reference.h"

using keel::HeadLossOptions;
using keel::LossParts;

namespace {

struct Result {
  LossParts loss;
  torch::Tensor d_hidden, d_head;
};

// The whole-logits path, as TransformerImpl::forward + language_model_loss do it.
Result whole(const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& t, const HeadLossOptions& o) {
  auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  auto logits = torch::matmul(h, w.t());
  if (o.final_softcap) logits = *o.final_softcap * torch::tanh(logits / *o.final_softcap);
  const int64_t pad = w.size(0) - o.vocab_size;
  if (pad > 0) logits.narrow(-1, o.vocab_size, pad).fill_(-std::numeric_limits<double>::infinity());
  Result r{keel::language_model_loss(logits, t, o.z_loss_coef), {}, {}};
  r.loss.total.backward();
  r.d_hidden = h.grad();
  r.d_head = w.grad();
  return r;
}

Result chunked(const torch::Tensor& h0, const torch::Tensor& w0, const torch::Tensor& t, const HeadLossOptions& o) {
  auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  Result r{keel::chunked_head_loss(h, w, t, o), {}, {}};
  r.loss.total.backward();
  r.d_hidden = h.grad();
  r.d_head = w.grad();
  return r;
}

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item<double>();
}

void compare(torch::Dtype dtype, double tol) {
  torch::manual_seed(11);
  const int64_t N = 37, C = 16, V = 35, padded = 40;
  auto h = torch::randn({N, C}, dtype), w = 0.5 * torch::randn({padded, C}, dtype);
  auto t = torch::randint(0, V, {N}, torch::kInt64);
  for (std::optional<double> cap : {std::optional<double>(), std::optional<double>(2.5)})
    for (double z : {0.0, 1e-2})
      for (int64_t chunk : {1, 5, 36, 37, 100}) {
        HeadLossOptions o;
        o.chunk_tokens = chunk;
        o.vocab_size = V;
        o.final_softcap = cap;
        o.z_loss_coef = z;
        SCOPED_TRACE("chunk " + std::to_string(chunk) + (cap ? " softcap" : "") + (z > 0 ? " z-loss" : ""));
        Result a = whole(h, w, t, o), b = chunked(h, w, t, o);
        EXPECT_NEAR(a.loss.ce.item<double>(), b.loss.ce.item<double>(), tol * a.loss.ce.item<double>());
        EXPECT_NEAR(a.loss.total.item<double>(), b.loss.total.item<double>(), tol * a.loss.total.item<double>());
        if (z > 0) EXPECT_NEAR(a.loss.z.item<double>(), b.loss.z.item<double>(), tol * a.loss.z.item<double>());
        EXPECT_LT(max_rel(b.d_hidden, a.d_hidden), tol);
        EXPECT_LT(max_rel(b.d_head, a.d_head), tol);
        // Padded rows of the head get no gradient.
        EXPECT_EQ(b.d_head.narrow(0, V, padded - V).abs().max().item<double>(), 0.0);
      }
}

}  // namespace

TEST(ChunkedLoss, EqualsWholeLogitsInFp64) { compare(torch::kFloat64, 1e-12); }

TEST(ChunkedLoss, EqualsWholeLogitsInFp32) { compare(torch::kFloat32, 1e-5); }

TEST(ChunkedLoss, Bf16ComputeStaysWithinBf16Tolerance) {
  torch::manual_seed(12);
  auto h = torch::randn({64, 32}), w = 0.3 * torch::randn({64, 32});
  auto t = torch::randint(0, 60, {64}, torch::kInt64);
  HeadLossOptions o;
  o.vocab_size = 60;
  o.chunk_tokens = 16;
  Result a = whole(h, w, t, o);
  o.compute_dtype = torch::kBFloat16;
  Result b = chunked(h, w, t, o);
  EXPECT_EQ(b.loss.ce.scalar_type(), torch::kFloat32);
  EXPECT_EQ(b.d_hidden.scalar_type(), torch::kFloat32);
  EXPECT_EQ(b.d_head.scalar_type(), torch::kFloat32);
  EXPECT_NEAR(a.loss.ce.item<double>(), b.loss.ce.item<double>(), 2e-2 * a.loss.ce.item<double>());
  EXPECT_LT(max_rel(b.d_hidden, a.d_hidden), 5e-2);
  EXPECT_LT(max_rel(b.d_head, a.d_head), 5e-2);
}

// Through the model: forward_hidden + the chunked head equals forward +
// language_model_loss, loss and every parameter's gradient (fp32, 1e-5).
TEST(ChunkedLoss, ModelLossAndGradientsEqualTheWholeLogitsPath) {
  auto cfg = keel_model_test::tiny_config();
  cfg.final_softcap = 4.0;
  auto a = keel_model_test::make_model(cfg, 3, torch::kFloat32), b = keel_model_test::make_model(cfg, 3, torch::kFloat32);
  auto idx = keel_model_test::random_tokens(cfg, 3, 12);
  auto targets = keel_model_test::random_tokens(cfg, 3, 12, 9);
  auto la = keel::language_model_loss(a->forward(idx), targets, 1e-3);
  la.total.backward();
  HeadLossOptions o;
  o.chunk_tokens = 7;
  o.vocab_size = cfg.vocab_size;
  o.final_softcap = cfg.final_softcap;
  o.z_loss_coef = 1e-3;
  auto hidden = b->forward_hidden(idx);  // shape: [3, 12, d_model]
  auto lb = keel::chunked_head_loss(hidden.reshape({-1, hidden.size(-1)}), b->lm_head, targets.reshape({-1}), o);
  lb.total.backward();
  EXPECT_NEAR(la.total.item<double>(), lb.total.item<double>(), 1e-5 * la.total.item<double>());
  auto pa = a->named_parameters(true), pb = b->named_parameters(true);
  for (const auto& item : pa) {
    SCOPED_TRACE(item.key());
    EXPECT_LT(max_rel(pb[item.key()].grad(), item.value().grad()), 1e-4);
  }
}

// The gradient is formed in the forward and scaled by the incoming one in
// backward: d(3 * total) = 3 d(total). Without grad mode nothing is formed.
TEST(ChunkedLoss, BackwardScalesTheFormedGradientAndEvaluationFormsNone) {
  torch::manual_seed(13);
  auto h0 = torch::randn({20, 8}, torch::kFloat64), w0 = torch::randn({16, 8}, torch::kFloat64);
  auto t = torch::randint(0, 14, {20}, torch::kInt64);
  HeadLossOptions o;
  o.vocab_size = 14;
  o.chunk_tokens = 6;
  o.z_loss_coef = 0.1;
  Result once = chunked(h0, w0, t, o);
  auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  (3.0 * keel::chunked_head_loss(h, w, t, o).total).backward();
  EXPECT_LT(max_rel(h.grad(), 3.0 * once.d_hidden), 1e-14);
  EXPECT_LT(max_rel(w.grad(), 3.0 * once.d_head), 1e-14);
  torch::NoGradGuard no_grad;
  auto eval = keel::chunked_head_loss(h, w, t, o);
  EXPECT_FALSE(eval.total.requires_grad());
  EXPECT_NEAR(eval.total.item<double>(), once.loss.total.item<double>(), 1e-14);
}

// On the CPU a chunk's logits are capped at 16M elements (64 MiB): at a 32k
// vocabulary 512 tokens, whatever train.loss_chunk_tokens says above that;
// off (0) stays off, and CUDA takes the key as given.
TEST(ChunkedLoss, CpuChunksAreHeldTo16MLogits) {
  EXPECT_EQ(keel::cpu_chunk_tokens(8192, 32768, torch::kCPU), 512);
  EXPECT_EQ(keel::cpu_chunk_tokens(8192, 4096, torch::kCPU), 4096);
  EXPECT_EQ(keel::cpu_chunk_tokens(1000, 4096, torch::kCPU), 1000) << "a smaller setting stands";
  EXPECT_EQ(keel::cpu_chunk_tokens(8192, 50304, torch::kCPU), (int64_t{1} << 24) / 50304);
  EXPECT_EQ(keel::cpu_chunk_tokens(8192, int64_t{1} << 22, torch::kCPU), 64) << "never below 64 tokens";
  EXPECT_EQ(keel::cpu_chunk_tokens(0, 32768, torch::kCPU), 0) << "0 is whole logits";
  EXPECT_EQ(keel::cpu_chunk_tokens(8192, 32768, torch::Device(torch::kCUDA, 0)), 8192);
}

namespace {

// The chunked loss with the CPU kernel (counted) and under CompositeOnly.
Result chunked_counting(const torch::Tensor& h, const torch::Tensor& w, const torch::Tensor& t,
                        const HeadLossOptions& o, int64_t* kernel_calls) {
  keel::OpCounter counter;
  Result r = chunked(h, w, t, o);
  auto c = counter.counts();
  auto it = c.by_name.find("keel::softmax_xent");
  *kernel_calls = it == c.by_name.end() ? 0 : it->second;
  return r;
}

}  // namespace

// The kernel against the production composite over a vocabulary long enough
// for the vector loops and a tail (1,003 of 1,024 padded columns), with and
// without the softcap and z-loss, fp32 and bf16 GEMMs, forward (ce, z) and
// the formed gradients; one kernel call per chunk, none under CompositeOnly.
TEST(ChunkedLoss, CpuSoftmaxKernelEqualsTheComposite) {
  if (!keel::fused_cpu_kernels_enabled()) GTEST_SKIP() << "the CPU kernels are off (KEEL_CPU_KERNELS=composite)";
  torch::manual_seed(14);
  const int64_t N = 70, C = 24, V = 1003, padded = 1024;
  auto h = torch::randn({N, C}), w = 0.6 * torch::randn({padded, C});
  h[3] *= 40;  // a row whose logits reach the hundreds: a peaked softmax, tanh near saturation under the cap
  auto t = torch::randint(0, V, {N}, torch::kInt64);
  t[5] = V - 1;  // a target in the scalar tail
  keel_test::for_each_simd_level([&] {
    for (std::optional<torch::Dtype> compute :
         {std::optional<torch::Dtype>(), std::optional<torch::Dtype>(torch::kBFloat16)})
      for (std::optional<double> cap : {std::optional<double>(), std::optional<double>(30.0)})
        for (double z : {0.0, 1e-2}) {
          HeadLossOptions o;
          o.chunk_tokens = 32;  // three chunks, the last of 6 rows
          o.vocab_size = V;
          o.final_softcap = cap;
          o.z_loss_coef = z;
          o.compute_dtype = compute;
          SCOPED_TRACE(std::string(compute ? "bf16" : "fp32") + (cap ? " softcap" : "") + (z > 0 ? " z-loss" : ""));
          int64_t calls = 0, composite_calls = 0;
          Result fused = chunked_counting(h, w, t, o, &calls);
          Result ref;
          {
            keel::CompositeOnly composite;
            ref = chunked_counting(h, w, t, o, &composite_calls);
          }
          EXPECT_EQ(calls, 3);
          EXPECT_EQ(composite_calls, 0);
          EXPECT_NEAR(fused.loss.ce.item<double>(), ref.loss.ce.item<double>(), 2e-6 * ref.loss.ce.item<double>());
          EXPECT_NEAR(fused.loss.total.item<double>(), ref.loss.total.item<double>(),
                      2e-6 * ref.loss.total.item<double>());
          if (z > 0)
            EXPECT_NEAR(fused.loss.z.item<double>(), ref.loss.z.item<double>(), 2e-6 * ref.loss.z.item<double>());
          // bf16: both sides round the same fp32 gradient to bf16 before the
          // GEMMs, so a last-bit difference there can move one element by a bf16 ulp.
          const double tol = compute ? 1e-2 : 1e-5;
          EXPECT_LT(max_rel(fused.d_hidden, ref.d_hidden), tol);
          EXPECT_LT(max_rel(fused.d_head, ref.d_head), tol);
          EXPECT_EQ(fused.d_head.narrow(0, V, padded - V).abs().max().item<double>(), 0.0);
        }
  });
}

// The kernel alone: declines what it does not handle (leaving the logits as
// they were), refuses a target outside the vocabulary, and without `grad`
// leaves the logits untouched when there is no softcap.
TEST(ChunkedLoss, CpuSoftmaxKernelDeclinesAndChecks) {
  if (!keel::fused_cpu_kernels_enabled()) GTEST_SKIP() << "the CPU kernels are off (KEEL_CPU_KERNELS=composite)";
  auto s = torch::randn({4, 40});
  auto t = torch::tensor({0, 5, 34, 2}, torch::kInt64);
  torch::Tensor lse, tl;
  auto s64 = s.to(torch::kFloat64);
  EXPECT_FALSE(keel::fused_cpu_softmax_xent(s64, t, 35, 0, 0.25, 0, true, &lse, &tl));
  auto strided = torch::randn({40, 4}).t();
  EXPECT_FALSE(keel::fused_cpu_softmax_xent(strided, t, 35, 0, 0.25, 0, true, &lse, &tl));
  {
    keel::CompositeOnly composite;
    auto before = s.clone();
    EXPECT_FALSE(keel::fused_cpu_softmax_xent(s, t, 35, 0, 0.25, 0, true, &lse, &tl));
    EXPECT_TRUE(torch::equal(s, before));
  }
  auto bad = torch::tensor({0, 5, 35, 2}, torch::kInt64);  // 35 is padding, not a token
  EXPECT_THROW(keel::fused_cpu_softmax_xent(s, bad, 35, 0, 0.25, 0, true, &lse, &tl), c10::Error);
  auto before = s.clone();
  ASSERT_TRUE(keel::fused_cpu_softmax_xent(s, t, 35, 0, 0.25, 0, false, &lse, &tl));
  EXPECT_TRUE(torch::equal(s, before));
  auto ref = torch::logsumexp(before.narrow(1, 0, 35), 1);
  EXPECT_LT((lse - ref).abs().max().item<double>(), 1e-5);
  EXPECT_LT((tl - before.gather(1, t.unsqueeze(1)).squeeze(1)).abs().max().item<double>(), 1e-7);
}
