// The transfer slope (sweep/lr_transfer.h): log2(best LR) against log2(size)
// is -1 when the best LR halves at every doubling, 0 when it stays, with a
// bootstrap interval over seeds that covers the truth when seeds agree and
// widens when they do not; a best LR on the grid's edge is flagged.
#include "analysis/lr_transfer.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace keel;

namespace {

const std::vector<double> kGrid = {1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2, 6.4e-2};

// Losses of a bowl in log2(LR) around `best`, plus `noise` * seed-dependent offsets.
TransferSize bowl(double size, double best, int seeds, double noise = 0.0) {
  TransferSize t;
  t.size = size;
  t.init_loss = 10.0;
  for (double lr : kGrid)
    for (int s = 0; s < seeds; ++s) {
      const double d = std::log2(lr / best);
      const double wobble = noise * std::sin(13.0 * s + 7.0 * lr * 1e3);
      t.results.push_back({lr, 3.0 + 0.05 * d * d + wobble, false});
    }
  return t;
}

}  // namespace

TEST(LrTransfer, HalvingPerDoublingIsMinusOneAndConstantIsZero) {
  const LrTransfer halving = lr_transfer({bowl(32, 3.2e-2, 3), bowl(64, 1.6e-2, 3), bowl(128, 8e-3, 3), bowl(256, 4e-3, 3)});
  EXPECT_DOUBLE_EQ(halving.drift, -1.0);
  EXPECT_EQ(halving.best_lr, (std::vector<double>{3.2e-2, 1.6e-2, 8e-3, 4e-3}));
  EXPECT_DOUBLE_EQ(halving.drift_ci.lo, -1.0);  // noiseless seeds: every replicate agrees
  EXPECT_DOUBLE_EQ(halving.drift_ci.hi, -1.0);
  EXPECT_FALSE(halving.at_edge);
  const LrTransfer flat = lr_transfer({bowl(2, 8e-3, 3), bowl(4, 8e-3, 3), bowl(8, 8e-3, 3), bowl(16, 8e-3, 3)});
  EXPECT_DOUBLE_EQ(flat.drift, 0.0);
  EXPECT_GT(flat.replicates, 1000u);
}

TEST(LrTransfer, NoisySeedsWidenTheIntervalAndEdgesAreFlagged) {
  const LrTransfer noisy = lr_transfer({bowl(32, 8e-3, 3, 0.06), bowl(64, 8e-3, 3, 0.06), bowl(128, 8e-3, 3, 0.06)});
  ASSERT_TRUE(std::isfinite(noisy.drift_ci.lo));
  EXPECT_LT(noisy.drift_ci.lo, noisy.drift_ci.hi);
  EXPECT_LE(noisy.drift_ci.lo, noisy.drift);
  EXPECT_GE(noisy.drift_ci.hi, noisy.drift);
  const LrTransfer edge = lr_transfer({bowl(32, 6.4e-2, 2), bowl(64, 1e-1, 2)});
  EXPECT_TRUE(edge.at_edge);
  // One seed: a slope, no interval.
  const LrTransfer single = lr_transfer({bowl(32, 8e-3, 1), bowl(64, 4e-3, 1)});
  EXPECT_DOUBLE_EQ(single.drift, -1.0);
  EXPECT_TRUE(std::isnan(single.drift_ci.lo));
}
