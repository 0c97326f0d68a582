// The fused CPU kernels (src/model/fused_ops.h) against the composite ATen
// expressions they replace: values and gradients, every gain shape, fp32 and
// fp64, the l2 norm below eps, determinism across thread counts, and the
// cases where they must decline (so the caller's composite path runs).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>

#include "model/fused_ops.h"
#include "model/norm.h"
#include "model/rope.h"
#include "simd_levels.h"
#include "util/host.h"

namespace {

using keel::fused_cpu_rope;
using keel::fused_cpu_row_norm;

// The production composite, the path CUDA runs: keel's Norm module with the
// kernels off (a copy of the expression here would not catch a broken one).
torch::Tensor composite_norm(const torch::Tensor& x, const torch::Tensor& w, int64_t dim, double eps, bool l2) {
  keel::CompositeOnly composite;
  keel::Norm norm(l2 ? keel::NormKind::l2 : keel::NormKind::rms, dim, w.defined(), false, eps,
                  w.defined() ? w.sizes().vec() : std::vector<int64_t>{});
  if (w.defined()) norm->weight = w;  // the caller's tensor, so its gradient lands there
  return norm->forward(x);
}

struct Grads {
  torch::Tensor y, dx, dw;
};

template <typename F>
Grads run(F f, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& dy) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto w = w0.defined() ? w0.detach().clone().requires_grad_(true) : w0;
  auto y = f(x, w);
  y.backward(dy);
  return {y.detach(), x.grad(), w.defined() ? w.grad() : torch::Tensor()};
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double tol, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double diff = (a - b).abs().max().item<double>();
  EXPECT_LT(diff, tol) << what;
}

TEST(FusedOps, RowNormMatchesCompositeForEveryGainShape) {
  keel_test::for_each_simd_level([&] {
    torch::manual_seed(3);
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
      const double tol = dtype == torch::kFloat64 ? 1e-12 : 2e-5;
      for (bool l2 : {false, true}) {
        auto x = torch::randn({3, 5, 4, 24}, dtype) * 3;
        auto dy = torch::randn_like(x);
        for (const std::vector<int64_t>& wshape : std::vector<std::vector<int64_t>>{{}, {24}, {4, 24}}) {
          torch::Tensor w = wshape.empty() ? torch::Tensor() : 1 + 0.3 * torch::randn(wshape, dtype);
          const std::string what = std::string(l2 ? "l2" : "rms") + " gain dims " + std::to_string(wshape.size());
          auto fused = run([&](auto& a, auto& b) { return fused_cpu_row_norm(a, b, 24, 1e-6, l2); }, x, w, dy);
          auto ref = run([&](auto& a, auto& b) { return composite_norm(a, b, 24, 1e-6, l2); }, x, w, dy);
          ASSERT_TRUE(fused.y.defined()) << what;
          expect_close(fused.y, ref.y, tol, what + " value");
          expect_close(fused.dx, ref.dx, 10 * tol, what + " dx");
          if (w.defined()) expect_close(fused.dw, ref.dw, 10 * tol * x.numel() / w.numel(), what + " dw");
        }
      }
    }
  });
}

TEST(FusedOps, L2BelowEpsUsesTheConstantScale) {
  // A row whose norm is below eps is divided by eps: its gradient is dy / eps.
  auto x = torch::full({2, 8}, 1e-4, torch::kFloat64);
  auto dy = torch::randn_like(x);
  auto fused = run([&](auto& a, auto& b) { return fused_cpu_row_norm(a, b, 8, 1.0, true); }, x, torch::Tensor(), dy);
  auto ref = run([&](auto& a, auto& b) { return composite_norm(a, b, 8, 1.0, true); }, x, torch::Tensor(), dy);
  expect_close(fused.y, ref.y, 1e-15, "value");
  expect_close(fused.dx, ref.dx, 1e-12, "dx");
  expect_close(fused.dx, dy, 1e-12, "dx = dy / eps");
}

TEST(FusedOps, NormModuleUsesTheKernelAndKeepsItsResult) {
  // NormImpl routes rms/l2 on the CPU through the kernel; a broken routing
  // (e.g. the gain applied twice) changes the value.
  torch::manual_seed(5);
  keel::Norm norm(keel::NormKind::rms, 16, true, false, 1e-5, std::vector<int64_t>{3, 16});
  {
    torch::NoGradGuard g;
    norm->weight.copy_(1 + 0.5 * torch::randn({3, 16}));
  }
  auto x = torch::randn({2, 7, 3, 16});
  expect_close(norm->forward(x), composite_norm(x, norm->weight, 16, 1e-5, false), 1e-5, "module");
}

TEST(FusedOps, WeightGradientIsIndependentOfThreadCount) {
  torch::manual_seed(9);
  auto x = torch::randn({64, 33, 40});
  auto w = torch::randn({40});
  auto dy = torch::randn_like(x);
  const int before = torch::get_num_threads();
  torch::set_num_threads(1);
  auto one = run([&](auto& a, auto& b) { return fused_cpu_row_norm(a, b, 40, 1e-6, false); }, x, w, dy);
  torch::set_num_threads(std::max(2, before));
  auto many = run([&](auto& a, auto& b) { return fused_cpu_row_norm(a, b, 40, 1e-6, false); }, x, w, dy);
  torch::set_num_threads(before);
  EXPECT_TRUE(torch::equal(one.dw, many.dw));
  EXPECT_TRUE(torch::equal(one.dx, many.dx));
}

TEST(FusedOps, RopeEqualsCompositeBitForBitAndItsGradient) {
  torch::manual_seed(4);
  const int64_t T = 9, D = 16;
  auto tables = keel::make_rope_tables(12, D, 10000.0, torch::kCPU);
  auto composite = [&](const torch::Tensor& x) {  // apply_rope's own composite, as CUDA runs it
    keel::CompositeOnly off;
    return keel::apply_rope(x, tables);
  };
  for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
    auto x = torch::randn({2, T, 3, D}, dtype);
    auto dy = torch::randn_like(x);
    auto fused = run([&](auto& a, auto&) { return fused_cpu_rope(a, tables.cos, tables.sin); }, x, {}, dy);
    auto ref = run([&](auto& a, auto&) { return composite(a); }, x, {}, dy);
    EXPECT_TRUE(torch::equal(fused.y, ref.y));
    expect_close(fused.dx, ref.dx, dtype == torch::kFloat64 ? 1e-14 : 1e-6, "rope dx");
    // apply_rope takes the fused path on the CPU.
    EXPECT_TRUE(torch::equal(keel::apply_rope(x, tables), ref.y));
  }
}

// The attention hands the kernels head slices of its fused q/k/v output:
// [B, T, H, D] views whose rows are not adjacent. They must read them in
// place and give what they give on a contiguous copy, gradients included.
TEST(FusedOps, StridedHeadSlicesGiveTheContiguousResults) {
  torch::manual_seed(6);
  const int64_t B = 2, T = 5, H = 3, D = 8, F = H * D + 2 * D;  // row width of a fused [q | k | v] output
  auto tables = keel::make_rope_tables(T, D, 10000.0, torch::kCPU);
  auto fused_out = torch::randn({B, T, F});
  auto dy = torch::randn({B, T, H, D});
  auto slice = [&](const torch::Tensor& full) { return full.split_with_sizes({H * D, D, D}, -1)[0].view({B, T, H, D}); };
  auto through = [&](const std::function<torch::Tensor(const torch::Tensor&)>& f, bool strided) {
    auto full = fused_out.clone().requires_grad_(true);
    auto x = strided ? slice(full) : slice(full).contiguous();
    EXPECT_EQ(x.is_contiguous(), !strided);
    auto y = f(x);
    y.backward(dy);
    return std::make_pair(y.detach(), full.grad());
  };
  auto w = 1 + 0.3 * torch::randn({D});
  const std::vector<std::pair<std::string, std::function<torch::Tensor(const torch::Tensor&)>>> kernels = {
      {"rope", [&](const torch::Tensor& x) { return fused_cpu_rope(x, tables.cos, tables.sin); }},
      {"rms", [&](const torch::Tensor& x) { return fused_cpu_row_norm(x, w, D, 1e-6, false); }},
      {"l2", [&](const torch::Tensor& x) { return fused_cpu_row_norm(x, {}, D, 1e-6, true); }}};
  for (const auto& [name, f] : kernels) {
    auto strided = through(f, true), dense = through(f, false);
    EXPECT_TRUE(torch::equal(strided.first, dense.first)) << name;
    EXPECT_TRUE(torch::equal(strided.second, dense.second)) << name;
  }
}

// The default, and on every CPU the oneDNN path forced on: CI's machines are
// Intel and AMD by turns, and each must test the path the other takes.
struct OneDnnLinearForced {
  explicit OneDnnLinearForced(bool on) { keel::set_onednn_linear(on); }
  ~OneDnnLinearForced() { keel::reset_onednn_linear(); }
};

TEST(FusedOps, LinearDefaultFollowsTheCpuVendor) {
  const char* env = std::getenv("KEEL_CPU_LINEAR");
  const bool composite = std::getenv("KEEL_CPU_KERNELS") && std::string(std::getenv("KEEL_CPU_KERNELS")) == "composite";
  if (!env) EXPECT_EQ(keel::onednn_linear_by_default(), keel::cpu_vendor() != "GenuineIntel") << keel::cpu_vendor();
  if (at::hasMKLDNN() && !composite) {
    EXPECT_EQ(keel::onednn_linear_enabled(), keel::onednn_linear_by_default());
    {
      OneDnnLinearForced on(true);
      EXPECT_TRUE(keel::onednn_linear_enabled());
    }
    {
      OneDnnLinearForced off(false);
      EXPECT_FALSE(keel::onednn_linear_enabled());
      // Off, linear() is at::linear: the same bits.
      auto x = torch::randn({7, 24}), w = torch::randn({40, 24});
      EXPECT_TRUE(torch::equal(keel::linear(x, w), torch::nn::functional::linear(x, w)));
    }
    EXPECT_EQ(keel::onednn_linear_enabled(), keel::onednn_linear_by_default()) << "reset goes back to the default";
  } else {
    OneDnnLinearForced on(true);
    EXPECT_FALSE(keel::onednn_linear_enabled()) << "no oneDNN, or the composite kernels asked for";
  }
}

TEST(FusedOps, LinearMatchesAtenLinearWithGradients) {
  // keel::linear on oneDNN (where this LibTorch has it), whatever the CPU's default.
  OneDnnLinearForced forced(true);
  if (at::hasMKLDNN() && !(std::getenv("KEEL_CPU_KERNELS") && std::string(std::getenv("KEEL_CPU_KERNELS")) == "composite"))
    EXPECT_TRUE(keel::onednn_linear_enabled());
  torch::manual_seed(8);
  // The weight gradient both ways (oneDNN on copied transposes, at::mm on views).
  for (bool dw_onednn : {false, true}) {
  keel::set_onednn_weight_grad(dw_onednn);
  for (bool bias : {false, true}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{37, 24}, {3, 11, 24}}) {
      auto x = torch::randn(shape), w = torch::randn({40, 24});
      auto b = bias ? torch::randn({40}) : torch::Tensor();
      std::vector<int64_t> out_shape = shape;
      out_shape.back() = 40;
      auto dy = torch::randn(out_shape);
      auto grads = [&](bool ours) {
        auto xx = x.clone().requires_grad_(true), ww = w.clone().requires_grad_(true);
        auto bb = bias ? b.clone().requires_grad_(true) : torch::Tensor();
        auto y = ours ? keel::linear(xx, ww, bb) : torch::nn::functional::linear(xx, ww, bb);
        y.backward(dy);
        return std::vector<torch::Tensor>{y.detach(), xx.grad(), ww.grad(), bias ? bb.grad() : torch::zeros({1})};
      };
      auto a = grads(true), r = grads(false);
      const std::string what = "bias " + std::to_string(bias) + " dims " + std::to_string(shape.size()) +
                               " dW on oneDNN " + std::to_string(dw_onednn);
      expect_close(a[0], r[0], 1e-4, what + " y");
      expect_close(a[1], r[1], 1e-4, what + " dx");
      expect_close(a[2], r[2], 1e-4, what + " dw");
      if (!dw_onednn)  // the switch takes effect: at::mm's own bits
        EXPECT_TRUE(torch::equal(a[2], dy.reshape({-1, 40}).t().mm(x.reshape({-1, 24})))) << what;
      expect_close(a[3], r[3], 1e-4, what + " db");
    }
  }
  }
  keel::reset_onednn_weight_grad();
  // A weight used twice (tied embedding and head) accumulates both gradients.
  auto w = torch::randn({16, 8}).requires_grad_(true);
  auto x = torch::randn({5, 8});
  (keel::linear(x, w).sum() + keel::linear(x, w).pow(2).sum()).backward();
  auto w2 = w.detach().clone().requires_grad_(true);
  (torch::nn::functional::linear(x, w2).sum() + torch::nn::functional::linear(x, w2).pow(2).sum()).backward();
  expect_close(w.grad(), w2.grad(), 1e-4, "tied");
  // fp64 and non-CPU-fp32 inputs take at::linear: exact.
  auto xd = torch::randn({4, 8}, torch::kFloat64), wd = torch::randn({3, 8}, torch::kFloat64);
  EXPECT_TRUE(torch::equal(keel::linear(xd, wd), torch::nn::functional::linear(xd, wd)));
}

TEST(FusedOps, DeclineWhatTheyDoNotHandle) {
  auto x = torch::randn({2, 3, 8});
  EXPECT_FALSE(fused_cpu_row_norm(x.to(torch::kBFloat16), {}, 8, 1e-6, false).defined());
  EXPECT_FALSE(fused_cpu_row_norm(x, torch::ones({3, 4}), 8, 1e-6, false).defined());  // gain shape
  EXPECT_FALSE(fused_cpu_row_norm(x, torch::ones({8}, torch::kFloat64), 8, 1e-6, false).defined());  // dtype
  EXPECT_FALSE(fused_cpu_row_norm(x, {}, 4, 1e-6, false).defined());  // dim is not the last size
  auto tables = keel::make_rope_tables(4, 8, 10000.0, torch::kCPU);
  EXPECT_FALSE(fused_cpu_rope(x, tables.cos, tables.sin).defined());                     // not 4-d
  EXPECT_FALSE(fused_cpu_rope(torch::randn({1, 5, 2, 8}), tables.cos, tables.sin).defined());  // T > table
  // Under CompositeOnly nothing takes a kernel.
  keel::CompositeOnly off;
  EXPECT_FALSE(fused_cpu_rope(torch::randn({1, 3, 2, 8}), tables.cos, tables.sin).defined());
  EXPECT_FALSE(fused_cpu_row_norm(x, {}, 8, 1e-6, false).defined());
  EXPECT_FALSE(keel::onednn_linear_enabled());
}

}  // namespace
