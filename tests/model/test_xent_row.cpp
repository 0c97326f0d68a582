// The CUDA softmax / cross-entropy kernel's code (src/model/cuda/xent_row.h)
// run on the CPU in the kernel's order (kThreads strided partial
// log-sum-exps, the same tree merge, then each column's gradient in place),
// against log-sum-exp and autograd in ATen: fp32 and bf16 rows, with and
// without the softcap and z-loss, padded columns, a vocabulary smaller than
// the block. tests/gpu/test_cuda.cpp checks the kernel inside the chunked
// loss on a GPU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "model/cuda/xent_kernel.h"

namespace {

using keel::xent::kThreads;

// What one block does to one row (xent_kernel.cu), serially.
template <typename T>
void row_as_the_kernel_does(T* x, int64_t target, const keel::xent::Params& p, float* lse_out, float* target_out) {
  *target_out = keel::xent::capped(static_cast<float>(x[target]), p.cap);
  std::vector<keel::xent::Lse> slots(kThreads);
  for (int tid = 0; tid < kThreads; ++tid) slots[tid] = keel::xent::thread_lse(x, p, tid, kThreads);
  for (int w = kThreads / 2; w > 0; w >>= 1)
    for (int tid = 0; tid < w; ++tid) slots[tid] = keel::xent::lse_merge(slots[tid], slots[tid + w]);
  const float lse = keel::xent::lse_value(slots[0]);
  *lse_out = lse;
  for (int64_t j = 0; j < p.padded; ++j) {
    const bool pad = j >= p.vocab;
    x[j] = static_cast<T>(keel::xent::grad(pad ? 0.0f : static_cast<float>(x[j]), j == target, pad, lse, p));
  }
}

struct Case {
  int64_t vocab, padded;
  double cap, z;
};

TEST(XentRow, KernelOrderMatchesLogSumExpAndAutograd) {
  torch::manual_seed(11);
  const int64_t rows = 6;
  for (const Case& c : {Case{1000, 1024, 0.0, 0.0}, Case{1000, 1024, 30.0, 1e-4}, Case{100, 128, 15.0, 1e-2},
                        Case{3000, 3000, 0.0, 1e-4}}) {
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      const std::string what = "vocab " + std::to_string(c.vocab) + " cap " + std::to_string(c.cap) + " z " +
                               std::to_string(c.z) + " " + c10::toString(dtype);
      auto logits = (torch::randn({rows, c.padded}) * 4).to(dtype);
      auto targets = torch::randint(0, c.vocab, {rows}, torch::kLong);
      targets[0] = c.vocab - 1;  // the last real column
      const double inv_n = 1.0 / 64;  // the batch's N, larger than this chunk
      // Reference: fp32 autograd from the same (rounded) logits.
      auto raw = logits.to(torch::kFloat32).requires_grad_(true);
      auto v = raw.narrow(1, 0, c.vocab);
      if (c.cap > 0) v = c.cap * torch::tanh(v / c.cap);
      auto lse_ref = torch::logsumexp(v, 1);
      auto tgt_ref = v.gather(1, targets.unsqueeze(1)).squeeze(1);
      ((lse_ref - tgt_ref).sum() * inv_n + c.z * lse_ref.pow(2).sum() * inv_n).backward();
      auto grad_ref = raw.grad().to(dtype).to(torch::kFloat32);
      // The kernel's code, row by row.
      const keel::xent::Params p{c.vocab, c.padded, static_cast<float>(c.cap), static_cast<float>(inv_n),
                                 static_cast<float>(c.z)};
      auto x = logits.clone();
      std::vector<float> lse(rows), tgt(rows);
      for (int64_t r = 0; r < rows; ++r) {
        if (dtype == torch::kFloat32)
          row_as_the_kernel_does(x[r].data_ptr<float>(), targets[r].item<int64_t>(), p, &lse[r], &tgt[r]);
        else
          row_as_the_kernel_does(x[r].data_ptr<c10::BFloat16>(), targets[r].item<int64_t>(), p, &lse[r], &tgt[r]);
      }
      EXPECT_TRUE(torch::allclose(torch::tensor(lse), lse_ref.detach(), 1e-5, 1e-5)) << what << " lse";
      EXPECT_TRUE(torch::allclose(torch::tensor(tgt), tgt_ref.detach(), 1e-5, 1e-5)) << what << " target logit";
      // One rounding of the output dtype apart at most (the reference rounds its fp32 gradient too).
      const double tol = dtype == torch::kFloat32 ? 2e-5 : 8e-3;
      auto got = x.to(torch::kFloat32);
      EXPECT_TRUE(torch::allclose(got, grad_ref, tol, 1e-9)) << what << " gradient, max |diff| "
                                                             << (got - grad_ref).abs().max().item<double>();
      EXPECT_TRUE(torch::equal(got.narrow(1, c.vocab, c.padded - c.vocab),
                               torch::zeros({rows, c.padded - c.vocab})))
          << what << " padding";
    }
  }
}

// An empty slot (a thread past the vocabulary) changes nothing in the merge.
TEST(XentRow, EmptySlotsMergeAway) {
  const keel::xent::Lse a{2.0f, 3.0f}, e = keel::xent::lse_empty();
  EXPECT_EQ(keel::xent::lse_merge(a, e).m, a.m);
  EXPECT_EQ(keel::xent::lse_merge(e, a).s, a.s);
  const keel::xent::Lse b = keel::xent::lse_add(keel::xent::lse_add(e, 1.0f), 5.0f);
  EXPECT_NEAR(keel::xent::lse_value(b), std::log(std::exp(1.0) + std::exp(5.0)), 1e-6);
}

}  // namespace
