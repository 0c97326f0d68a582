// The MLP's fused activations (src/model/fused_ops.h) against the
// composites they replace, in float64 ATen with autograd: fused_cpu_glu
// against silu(g) * u and gelu_tanh(g) * u, fused_cpu_gelu against the exact
// (erf) GELU; forward and gradients over the whole range where the
// activations bend and saturate, strided inputs, and the MLP layer on each
// against the layer on the composite.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "model/fused_ops.h"
#include "model/transformer.h"
#include "simd_levels.h"
#include "train/op_counter.h"

namespace {

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got.to(torch::kFloat64) - want).abs().max().item<double>();
  EXPECT_LE(err, tol * std::max(1.0, want.abs().max().item<double>())) << what << ": max |error| " << err;
}

// x spans the saturated tails (|x| up to ~40) and the bend near 0, as fp32 values in float64.
torch::Tensor activation_inputs(int64_t rows, int64_t cols) {
  return torch::cat({torch::linspace(-40, 40, 2000), torch::randn({rows * cols - 2000}) * 3})
      .view({rows, cols})
      .to(torch::kFloat32)
      .to(torch::kFloat64);
}

TEST(FusedGlu, MatchesTheFloat64CompositeForwardAndBackward) {
  keel_test::for_each_simd_level([&] {
    torch::manual_seed(3);
    for (bool silu : {true, false}) {
      const std::string what = silu ? "swiglu" : "geglu_tanh";
      auto g64 = activation_inputs(3, 1000);
      auto u64 = torch::randn({3, 1000}, torch::kFloat64).to(torch::kFloat32).to(torch::kFloat64);
      auto dh = torch::randn({3, 1000}, torch::kFloat64).to(torch::kFloat32).to(torch::kFloat64);
      auto gr = g64.clone().requires_grad_(true), ur = u64.clone().requires_grad_(true);
      auto want = (silu ? torch::silu(gr) : torch::gelu(gr, "tanh")) * ur;
      (want * dh).sum().backward();

      auto g = g64.to(torch::kFloat32).requires_grad_(true), u = u64.to(torch::kFloat32).requires_grad_(true);
      auto got = keel::fused_cpu_glu(g, u, silu);
      ASSERT_TRUE(got.defined()) << what;
      (got * dh.to(torch::kFloat32)).sum().backward();
      expect_close(got.detach(), want.detach(), 2e-6, what + " h");
      expect_close(g.grad(), gr.grad(), 2e-6, what + " dg");
      expect_close(u.grad(), ur.grad(), 2e-6, what + " du");
    }
  });
}

TEST(FusedGlu, TakesStridedInputsAndDeclinesWhatItDoesNotServe) {
  torch::manual_seed(4);
  auto both = torch::randn({4, 6, 2 * 33});
  auto g = both.narrow(-1, 0, 33), u = both.narrow(-1, 33, 33);  // rows 66 apart
  auto got = keel::fused_cpu_glu(g, u, true);
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.sizes(), g.sizes());
  EXPECT_TRUE(torch::allclose(got, torch::silu(g) * u, 1e-6, 1e-6));
  EXPECT_FALSE(keel::fused_cpu_glu(g.to(torch::kBFloat16), u.to(torch::kBFloat16), true).defined());
  EXPECT_FALSE(keel::fused_cpu_glu(g, u.narrow(-1, 0, 32), true).defined()) << "shapes differ";
  keel::CompositeOnly composite;
  EXPECT_FALSE(keel::fused_cpu_glu(g, u, true).defined());
}

// The MLP of this kind on its kernel against the MLP on the composite
// (CompositeOnly): the kernel's backward runs once, or not at all, and the
// output and every parameter's gradient agree. Rounding differs (one pass
// against several): errors relative to the largest value.
void expect_mlp_matches_its_composite(keel::MlpKind kind, const std::string& kernel_backward,
                                      const std::string& what) {
  torch::manual_seed(9);
  keel::ModelConfig cfg;
  cfg.d_model = 32;
  cfg.mlp = kind;
  keel::Mlp mlp(cfg);
  for (auto& p : mlp->parameters()) torch::nn::init::normal_(p, 0.0, 0.3);
  auto x = torch::randn({2, 5, 32});
  auto run = [&](bool composite) {
    std::unique_ptr<keel::CompositeOnly> guard;
    if (composite) guard = std::make_unique<keel::CompositeOnly>();
    mlp->zero_grad();
    keel::OpCounter counter;
    auto y = mlp->forward(x);
    y.pow(2).sum().backward();
    EXPECT_EQ(counter.counts().by_name.count(kernel_backward), composite ? 0u : 1u) << what;
    std::vector<torch::Tensor> out{y.detach()};
    for (const auto& p : mlp->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto fused = run(false), composite = run(true);
  ASSERT_EQ(fused.size(), composite.size());
  for (size_t i = 0; i < fused.size(); ++i)
    expect_close(fused[i], composite[i].to(torch::kFloat64), 1e-5,
                 what + (i == 0 ? " output" : " gradient of parameter " + std::to_string(i - 1)));
}

TEST(FusedGlu, TheMlpLayerMatchesItsComposite) {
  expect_mlp_matches_its_composite(keel::MlpKind::swiglu, "keel::glu_backward", "swiglu");
  expect_mlp_matches_its_composite(keel::MlpKind::geglu_tanh, "keel::glu_backward", "geglu_tanh");
}

TEST(FusedGelu, MatchesTheFloat64CompositeForwardAndBackward) {
  keel_test::for_each_simd_level([&] {
    torch::manual_seed(5);
    auto x64 = activation_inputs(3, 1000);
    auto dy = torch::randn({3, 1000}, torch::kFloat64).to(torch::kFloat32).to(torch::kFloat64);
    auto xr = x64.clone().requires_grad_(true);
    auto want = torch::gelu(xr);  // exact erf GELU, in float64
    (want * dy).sum().backward();

    auto x = x64.to(torch::kFloat32).requires_grad_(true);
    keel::OpCounter counter;
    auto got = keel::fused_cpu_gelu(x);
    ASSERT_TRUE(got.defined());
    (got * dy.to(torch::kFloat32)).sum().backward();
    const auto ops = counter.counts().by_name;
    EXPECT_EQ(ops.count("keel::gelu"), 1u) << "the kernel, not ATen's gelu, ran";
    EXPECT_EQ(ops.count("keel::gelu_backward"), 1u);
    expect_close(got.detach(), want.detach(), 2e-6, "gelu");
    expect_close(x.grad(), xr.grad(), 2e-6, "gelu dx");
    // Near 0 and in the left tail, where errors relative to the largest value say nothing:
    // Φ comes from erfc there, not 0.5 (1 + erf), so GELU(-6) ~ -6e-9 keeps the
    // approximation's relative error (0.4%) instead of cancelling to 0.
    auto small = torch::tensor({-6.0, -4.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 3.0}, torch::kFloat64);
    auto y = keel::fused_cpu_gelu(small.to(torch::kFloat32)).to(torch::kFloat64);
    auto ref = torch::gelu(small);
    EXPECT_TRUE(torch::allclose(y, ref, 5e-3, 1e-12)) << y << ref;
    EXPECT_LT(y[0].item<double>(), 0.0) << "GELU(-6) is negative, not 0";
  });
}

TEST(FusedGelu, TakesStridedInputsAndDeclinesWhatItDoesNotServe) {
  torch::manual_seed(6);
  auto x = torch::randn({4, 6, 40}).narrow(-1, 3, 33);  // rows 40 apart
  auto got = keel::fused_cpu_gelu(x);
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.sizes(), x.sizes());
  EXPECT_TRUE(torch::allclose(got, torch::gelu(x), 1e-6, 1e-6));
  EXPECT_FALSE(keel::fused_cpu_gelu(x.to(torch::kBFloat16)).defined());
  EXPECT_FALSE(keel::fused_cpu_gelu(torch::empty({0, 4})).defined());
  keel::CompositeOnly composite;
  EXPECT_FALSE(keel::fused_cpu_gelu(x).defined());
}

TEST(FusedGelu, TheMlpLayerMatchesItsComposite) {
  expect_mlp_matches_its_composite(keel::MlpKind::gelu, "keel::gelu_backward", "gelu");
}

}  // namespace
