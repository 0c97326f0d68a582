// sweep/study_stats.h: the Wilson interval against worked values, mean and
// standard deviation, and the bootstrap of the LR sensitivity (seeded,
// undefined with one seed, degenerate when seeds agree, wider when they do not).
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/study_stats.h"

namespace {

TEST(StudyStats, WilsonIntervalMatchesWorkedValues) {
  auto w = keel::wilson_interval(58, 100);  // p = 0.58
  EXPECT_NEAR(w.lo, 0.4821, 1e-4);
  EXPECT_NEAR(w.hi, 0.6720, 1e-4);
  w = keel::wilson_interval(0, 10);  // never below 0, still informative at k = 0
  EXPECT_EQ(w.lo, 0.0);
  EXPECT_NEAR(w.hi, 0.2775, 1e-4);
  w = keel::wilson_interval(10, 10);
  EXPECT_NEAR(w.lo, 0.7225, 1e-4);
  EXPECT_EQ(w.hi, 1.0);
  w = keel::wilson_interval(0, 2);
  EXPECT_NEAR(w.hi, 0.6576, 1e-4);
  EXPECT_TRUE(std::isnan(keel::wilson_interval(0, 0).lo));
  EXPECT_TRUE(std::isnan(keel::wilson_interval(3, 2).hi));
}

TEST(StudyStats, MeanAndSampleStandardDeviation) {
  auto m = keel::mean_sd({1.0, 2.0, 3.0, NAN, INFINITY});
  EXPECT_EQ(m.n, 3u);
  EXPECT_DOUBLE_EQ(m.mean, 2.0);
  EXPECT_DOUBLE_EQ(m.sd, 1.0);
  m = keel::mean_sd({4.0});
  EXPECT_DOUBLE_EQ(m.mean, 4.0);
  EXPECT_TRUE(std::isnan(m.sd));
  EXPECT_EQ(keel::mean_sd({}).n, 0u);
}

TEST(StudyStats, BootstrapOfTheLrSensitivity) {
  const double l0 = 6.0;
  // One seed per LR: no interval.
  std::vector<keel::LrResult> one = {{1e-3, 4.0, false}, {1e-2, 3.5, false}, {1e-1, 5.0, false}};
  EXPECT_TRUE(std::isnan(keel::bootstrap_lr_sensitivity(one, l0).sensitivity.lo));
  // Seeds that agree: the interval is the point estimate.
  std::vector<keel::LrResult> agree;
  for (const auto& r : one) agree.push_back(r), agree.push_back(r);
  const auto point = keel::lr_sensitivity(agree, l0);
  auto ci = keel::bootstrap_lr_sensitivity(agree, l0);
  EXPECT_DOUBLE_EQ(ci.sensitivity.lo, point.sensitivity);
  EXPECT_DOUBLE_EQ(ci.sensitivity.hi, point.sensitivity);
  EXPECT_DOUBLE_EQ(ci.best_lr.lo, 1e-2);
  EXPECT_DOUBLE_EQ(ci.best_lr.hi, 1e-2);
  EXPECT_EQ(ci.replicates, 2000u);
  // At LR 1e-1 one of three seeds diverged: the interval widens and holds the estimate.
  std::vector<keel::LrResult> mixed = {{1e-3, 4.0, false}, {1e-3, 4.1, false}, {1e-3, 3.9, false},
                                       {1e-2, 3.5, false}, {1e-2, 3.6, false}, {1e-2, 3.55, false},
                                       {1e-1, 3.4, false}, {1e-1, 3.6, false}, {1e-1, NAN, true}};
  const auto est = keel::lr_sensitivity(mixed, l0);
  ci = keel::bootstrap_lr_sensitivity(mixed, l0);
  EXPECT_LT(ci.sensitivity.lo, ci.sensitivity.hi);
  EXPECT_LE(ci.sensitivity.lo, est.sensitivity);
  EXPECT_GE(ci.sensitivity.hi, est.sensitivity);
  EXPECT_LE(ci.best_lr.lo, 1e-2);  // some replicates draw the two good seeds at 1e-1
  EXPECT_EQ(ci.best_lr.hi, 1e-1);
  // Seeded: a regenerated report gives the same interval.
  auto again = keel::bootstrap_lr_sensitivity(mixed, l0);
  EXPECT_EQ(again.sensitivity.lo, ci.sensitivity.lo);
  EXPECT_EQ(again.sensitivity.hi, ci.sensitivity.hi);
}

}  // namespace
