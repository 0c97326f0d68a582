// train.update_clip (issue 54): the update an optimizer made, clipped to a
// norm, globally or per parameter, against the formula done by hand; the
// clipped step is the optimizer's step scaled, its direction kept.
#include <gtest/gtest.h>

#include "optim/update_clip.h"

using keel::NamedParam;

TEST(UpdateClip, BoundsTheUpdateNormAndKeepsItsDirection) {
  auto a = torch::tensor({1.0, 1.0}, torch::kFloat64), b = torch::tensor({2.0}, torch::kFloat64);
  std::vector<NamedParam> ps = {{"a", a}, {"b", b}};
  std::vector<torch::Tensor> before = {a.clone(), b.clone()};
  a.add_(torch::tensor({3.0, 0.0}, torch::kFloat64));  // the optimizer's update: (3, 0) and (4): norm 5
  b.add_(4.0);
  auto norm = keel::clip_update(ps, before, 1.0, /*per_param=*/false);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-12) << "the norm before clipping";
  const double s = 1.0 / (5.0 + 1e-6);
  EXPECT_NEAR(a[0].item<double>(), 1.0 + 3.0 * s, 1e-12);
  EXPECT_NEAR(a[1].item<double>(), 1.0, 1e-12);
  EXPECT_NEAR(b[0].item<double>(), 2.0 + 4.0 * s, 1e-12);
  const double after = std::sqrt(std::pow(a[0].item<double>() - 1, 2) + std::pow(b[0].item<double>() - 2, 2));
  EXPECT_NEAR(after, 1.0, 1e-6);
  // An update within the norm is left alone.
  before = {a.clone(), b.clone()};
  a.add_(0.1);
  const auto kept = a.clone();
  keel::clip_update(ps, before, 1.0, false);
  EXPECT_TRUE(torch::equal(a, kept));
}

TEST(UpdateClip, PerParameterClipsEachToItsOwnNorm) {
  auto a = torch::zeros({1}, torch::kFloat64), b = torch::zeros({1}, torch::kFloat64);
  std::vector<NamedParam> ps = {{"a", a}, {"b", b}};
  std::vector<torch::Tensor> before = {a.clone(), b.clone()};
  a.fill_(3.0);  // above 2: clipped to 2
  b.fill_(0.5);  // below 2: kept
  auto norm = keel::clip_update(ps, before, 2.0, /*per_param=*/true);
  EXPECT_NEAR(norm.item<double>(), std::sqrt(9.25), 1e-12);
  EXPECT_NEAR(a[0].item<double>(), 3.0 * 2.0 / (3.0 + 1e-6), 1e-12);
  EXPECT_EQ(b[0].item<double>(), 0.5);
}
