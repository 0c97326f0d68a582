// LR sensitivity (Wortsman et al. 2023, docs/papers.md#small-scale-proxies-and-lr-sensitivity)
// on hand-made tables.
#include <gtest/gtest.h>

#include <cmath>

#include "analysis/lr_sensitivity.h"

using keel::LrResult;

TEST(LrSensitivity, MeanOverTheGridOfCappedLossMinusBest) {
  const double l0 = 8.0;
  const std::vector<LrResult> table = {
      {1e-3, 5.0, false},
      {3e-3, 4.0, false},   // best
      {1e-2, 4.5, false},
      {3e-2, 9.0, false},   // a final loss at or above l0 is loss divergence: l0
      {1e-1, 4.2, true},    // diverged (the loss exploded on the way) counts as l0 whatever its final loss
      {3e-1, NAN, false},   // no finite loss counts as l0
  };
  auto s = keel::lr_sensitivity(table, l0);
  // capped: 5, 4, 4.5, 8, 8, 8; minus l* = 4: 1, 0, 0.5, 4, 4, 4; mean 13.5 / 6.
  EXPECT_DOUBLE_EQ(s.sensitivity, 2.25);
  EXPECT_DOUBLE_EQ(s.best_loss, 4.0);
  EXPECT_DOUBLE_EQ(s.best_lr, 3e-3);
  EXPECT_DOUBLE_EQ(s.max_stable_lr, 1e-2);
  EXPECT_EQ(s.grid_points, 6u);
  EXPECT_EQ(s.diverged, 3u);
}

TEST(LrSensitivity, OrderDoesNotMatterAndSeedsAverageAfterCapping) {
  const std::vector<LrResult> table = {
      {1e-2, 3.0, false}, {1e-3, 5.0, false}, {1e-3, 7.0, true},  // two seeds at 1e-3: (5 + 10) / 2
  };
  auto s = keel::lr_sensitivity(table, 10.0);
  EXPECT_DOUBLE_EQ(s.best_loss, 3.0);
  EXPECT_DOUBLE_EQ(s.best_lr, 1e-2);
  EXPECT_DOUBLE_EQ(s.sensitivity, (7.5 - 3.0 + 0.0) / 2);
  EXPECT_EQ(s.grid_points, 2u);
  EXPECT_DOUBLE_EQ(s.max_stable_lr, 1e-2);  // 1e-3 had a diverged seed
}

TEST(LrSensitivity, AFlatCurveIsInsensitiveAndAllDivergedIsNotANumber) {
  auto flat = keel::lr_sensitivity({{1e-3, 4.0, false}, {1e-2, 4.0, false}}, 8.0);
  EXPECT_DOUBLE_EQ(flat.sensitivity, 0.0);
  // Everything at l0 would give 0 by the formula: reported as NaN rather
  // than as "perfectly insensitive".
  auto dead = keel::lr_sensitivity({{1e-3, NAN, true}, {1e-2, 9.0, false}}, 8.0);
  EXPECT_TRUE(std::isnan(dead.sensitivity));
  EXPECT_TRUE(std::isnan(dead.best_lr));
  EXPECT_EQ(dead.diverged, 2u);  // 9.0 >= l0: a final loss above the initial one is loss divergence too
  auto none = keel::lr_sensitivity({}, 8.0);
  EXPECT_EQ(none.grid_points, 0u);
  EXPECT_TRUE(std::isnan(none.sensitivity));
}
