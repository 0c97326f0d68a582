// GradSync on two Gloo ranks in one process (one thread each): gradients
// become the mean over ranks, every bucket is launched from the backward
// hooks while backward runs (overlap), in the same order on both ranks, and
// accumulation over micro-batches syncs only the final gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "test_util.h"

#include "distributed/grad_sync.h"
#include "distributed/launcher.h"
#include "distributed/process_group.h"

using keel::Dist;
using keel::DistEnv;
using keel::GradSync;

namespace {

struct RankResult {
  std::vector<torch::Tensor> grads;
  size_t buckets = 0;
  int64_t from_hooks = 0;
};

// Deterministic weights without the global generator (the two ranks are
// threads of one process and would race on it).
void set_weights(torch::nn::Linear& l1, torch::nn::Linear& l2) {
  torch::NoGradGuard no_grad;
  double v = 0.05;
  for (auto* l : {&l1, &l2})
    for (auto& p : (*l)->parameters()) {
      p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat32) * v).view(p.sizes()));
      v += 0.07;
    }
}

// A small MLP whose input depends on the rank, so each rank's gradient differs.
DistEnv two_rank_env(int rank, int port) { return keel_test::thread_rank_env(rank, 2, port); }

RankResult run_rank(int rank, int port, double bucket_mb, bool overlap, int micro_steps,
                    std::vector<int> owners = {}) {
  Dist dist(two_rank_env(rank, port), keel::DistBackend::gloo, 30);
  auto l1 = torch::nn::Linear(8, 16), l2 = torch::nn::Linear(16, 4);
  set_weights(l1, l2);  // the same on both ranks
  std::vector<torch::Tensor> params;
  for (auto& p : l1->parameters()) params.push_back(p);
  for (auto& p : l2->parameters()) params.push_back(p);
  GradSync sync(params, dist, bucket_mb, overlap, owners);
  sync.zero_grad();
  for (int m = 0; m < micro_steps; ++m) {
    if (m == micro_steps - 1) sync.arm();
    auto x = torch::full({3, 8}, 0.1 * (rank + 1) * (m + 1));
    l2->forward(torch::tanh(l1->forward(x))).pow(2).sum().backward();
  }
  sync.finish();
  RankResult r;
  for (auto& p : params) r.grads.push_back(p.grad().clone());
  r.buckets = sync.bucket_count();
  r.from_hooks = sync.launched_from_hooks();
  return r;
}

// The same gradients computed by one process: mean over ranks of the sum
// over micro-steps.
std::vector<torch::Tensor> reference(int micro_steps) {
  std::vector<torch::Tensor> sum;
  for (int rank = 0; rank < 2; ++rank) {
    auto l1 = torch::nn::Linear(8, 16), l2 = torch::nn::Linear(16, 4);
    set_weights(l1, l2);
    for (int m = 0; m < micro_steps; ++m) {
      auto x = torch::full({3, 8}, 0.1 * (rank + 1) * (m + 1));
      l2->forward(torch::tanh(l1->forward(x))).pow(2).sum().backward();
    }
    std::vector<torch::Tensor> g;
    for (auto& p : l1->parameters()) g.push_back(p.grad());
    for (auto& p : l2->parameters()) g.push_back(p.grad());
    if (sum.empty()) sum = g;
    else for (size_t i = 0; i < g.size(); ++i) sum[i] = sum[i] + g[i];
  }
  for (auto& t : sum) t = t / 2.0;
  return sum;
}

void check(double bucket_mb, bool overlap, int micro_steps, size_t expect_buckets) {
  const int port = keel::find_free_port();
  RankResult r0, r1;
  std::thread t1([&] { r1 = run_rank(1, port, bucket_mb, overlap, micro_steps); });
  r0 = run_rank(0, port, bucket_mb, overlap, micro_steps);
  t1.join();
  auto ref = reference(micro_steps);
  ASSERT_EQ(r0.grads.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_TRUE(torch::allclose(r0.grads[i], ref[i], 1e-5, 1e-6)) << "param " << i;
    EXPECT_TRUE(torch::equal(r0.grads[i], r1.grads[i])) << "ranks disagree on param " << i;
  }
  EXPECT_EQ(r0.buckets, expect_buckets);
  // With overlap every bucket is launched by a hook during backward.
  EXPECT_EQ(r0.from_hooks, overlap ? static_cast<int64_t>(expect_buckets) : 0);
}

}  // namespace

TEST(GradSync, OneBucketIsTheMean) { check(25.0, true, 1, 1); }

TEST(GradSync, TinyBucketsLaunchFromHooks) {
  // A cap below one float puts every tensor in its own bucket.
  check(1e-7, true, 1, 4);
}

TEST(GradSync, AccumulationSyncsOnlyTheFinalGradient) { check(1e-7, true, 3, 4); }

TEST(GradSync, WithoutOverlapAllReducesAfterBackward) { check(1e-7, false, 2, 4); }

// ZeRO-1: reduce-scattered to owners that interleave in registration order
// (so a bucket's buffer is regrouped by owner), in one bucket and in one per
// tensor; each owner ends with the mean gradient of its parameters, bit for
// bit the all-reduce's (a sum of two).
TEST(GradSync, ShardedGivesEachOwnerTheMeanOfItsParameters) {
  const std::vector<int> owners = {1, 0, 0, 1};
  for (double bucket_mb : {25.0, 1e-7}) {
    const int port = keel::find_free_port(), port2 = keel::find_free_port();
    RankResult s0, s1, a0, a1;
    std::thread t1([&] { s1 = run_rank(1, port, bucket_mb, true, 2, owners); });
    s0 = run_rank(0, port, bucket_mb, true, 2, owners);
    t1.join();
    std::thread t2([&] { a1 = run_rank(1, port2, bucket_mb, true, 2); });
    a0 = run_rank(0, port2, bucket_mb, true, 2);
    t2.join();
    for (size_t i = 0; i < owners.size(); ++i) {
      const auto& mine = owners[i] == 0 ? s0.grads[i] : s1.grads[i];
      const auto& other = owners[i] == 0 ? s1.grads[i] : s0.grads[i];
      EXPECT_TRUE(torch::equal(mine, a0.grads[i])) << "param " << i << ", bucket_mb " << bucket_mb;
      EXPECT_FALSE(torch::equal(other, a0.grads[i])) << "param " << i << " was reduced on a rank that does not own it";
    }
    EXPECT_EQ(s0.from_hooks, static_cast<int64_t>(s0.buckets));
  }
}

namespace {

// Two steps with the output layer registered first, as keel's untied
// lm_head is (after wte): reverse registration order would put it in the
// last bucket although backward finishes it first.
struct OrderResult {
  std::vector<std::vector<size_t>> first_step, second_step;
  std::vector<torch::Tensor> grads;
};

OrderResult run_head_first(int rank, int port) {
  Dist dist(two_rank_env(rank, port), keel::DistBackend::gloo, 30);
  auto l1 = torch::nn::Linear(8, 16), l2 = torch::nn::Linear(16, 4);
  set_weights(l1, l2);
  std::vector<torch::Tensor> params;
  for (auto& p : l2->parameters()) params.push_back(p);  // the "head": indices 0, 1
  for (auto& p : l1->parameters()) params.push_back(p);
  GradSync sync(params, dist, 1e-7, /*overlap=*/true);
  OrderResult r;
  for (int step = 0; step < 2; ++step) {
    sync.zero_grad();
    sync.arm();
    auto x = torch::full({3, 8}, 0.1 * (rank + 1));
    l2->forward(torch::tanh(l1->forward(x))).pow(2).sum().backward();
    sync.finish();
    (step == 0 ? r.first_step : r.second_step) = sync.launch_log();
  }
  for (auto& p : params) r.grads.push_back(p.grad().clone());
  return r;
}

}  // namespace

TEST(GradSync, BucketsFollowTheOrderGradientsBecomeReady) {
  const int port = keel::find_free_port();
  OrderResult r0, r1;
  std::thread t1([&] { r1 = run_head_first(1, port); });
  r0 = run_head_first(0, port);
  t1.join();
  ASSERT_EQ(r0.first_step.size(), 4u);
  ASSERT_EQ(r0.second_step.size(), 4u);
  // First step: the guess (reverse registration) launches l1's bias first
  // and the head's parameters last.
  EXPECT_EQ(r0.first_step.front(), std::vector<size_t>{3});
  EXPECT_GE(r0.first_step.back().front(), 0u);
  EXPECT_LE(r0.first_step.back().front(), 1u);
  // Second step: the head's gradients are ready first and launch first.
  ASSERT_FALSE(r0.second_step.front().empty());
  EXPECT_LE(r0.second_step.front().front(), 1u) << "the head's bucket should launch first";
  EXPECT_EQ(r0.second_step, r1.second_step) << "ranks must launch in the same order";
  // Gradients are still the mean over ranks after the rebuild.
  auto ref_l1 = torch::nn::Linear(8, 16), ref_l2 = torch::nn::Linear(16, 4);
  set_weights(ref_l1, ref_l2);
  for (int rank = 0; rank < 2; ++rank) {
    auto x = torch::full({3, 8}, 0.1 * (rank + 1));
    ref_l2->forward(torch::tanh(ref_l1->forward(x))).pow(2).sum().backward();
  }
  std::vector<torch::Tensor> ref;
  for (auto& p : ref_l2->parameters()) ref.push_back(p.grad() / 2.0);
  for (auto& p : ref_l1->parameters()) ref.push_back(p.grad() / 2.0);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_TRUE(torch::allclose(r0.grads[i], ref[i], 1e-5, 1e-6)) << "param " << i;
    EXPECT_TRUE(torch::equal(r0.grads[i], r1.grads[i])) << "param " << i;
  }
}

// NCCL waits order the stream and let the host run ahead (the process
// group's watchdog enforces the timeout); Gloo waits block with a timeout.
TEST(Dist, OnlyGlooBlocksTheHostOnWait) {
  EXPECT_TRUE(keel::host_waits_for_collectives(keel::DistBackend::gloo));
  EXPECT_FALSE(keel::host_waits_for_collectives(keel::DistBackend::nccl));
}
