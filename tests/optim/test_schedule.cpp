#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"
#include "optim/schedule.h"

using namespace keel;

static TrainConfig sched(const std::string& kind) {
  TrainConfig t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 10;
  t.max_steps = 110;
  t.schedule = keel_test::as<keel::ScheduleKind>(kind);
  t.decay_fraction = 0.2;
  return t;
}

TEST(Schedule, LinearWarmupFromLrOverWarmup) {
  auto t = sched("cosine");
  EXPECT_DOUBLE_EQ(lr_at(t, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(t, 4), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(t, 9), 1.0);
}

TEST(Schedule, CosineHitsPeakMidpointAndFloor) {
  auto t = sched("cosine");
  EXPECT_DOUBLE_EQ(lr_at(t, 10), 1.0);
  EXPECT_NEAR(lr_at(t, 60), 0.55, 1e-12);             // halfway: min + (peak-min)/2
  EXPECT_NEAR(lr_at(t, 35), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_NEAR(lr_at(t, 110), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(t, 500), 0.1, 1e-12);             // never below the floor
}

TEST(Schedule, LinearAndConstant) {
  auto lin = sched("linear");
  EXPECT_NEAR(lr_at(lin, 60), 0.55, 1e-12);
  EXPECT_NEAR(lr_at(lin, 35), 1.0 - 0.9 * 0.25, 1e-12);
  auto c = sched("constant");
  EXPECT_DOUBLE_EQ(lr_at(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(c, 109), 1.0);
}

TEST(Schedule, WarmupStableDecay) {
  auto t = sched("wsd");  // decay over the last 22 steps (0.2 * 110): from step 88
  EXPECT_DOUBLE_EQ(lr_at(t, 50), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(t, 87), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(t, 88), 1.0);
  EXPECT_NEAR(lr_at(t, 99), 1.0 - 0.9 * 11.0 / 22.0, 1e-12);
  EXPECT_NEAR(lr_at(t, 110), 0.1, 1e-12);
}

TEST(Schedule, NoWarmup) {
  auto t = sched("cosine");
  t.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(lr_at(t, 0), 1.0);
}

// Cooldown branches (issue 54, Hägele et al. 2024): from the trunk's LR at
// the branch point to 0 over cooldown_steps, in each shape; the trunk's
// schedule before it is untouched.
TEST(Schedule, CooldownDecaysFromTheBranchPointToZero) {
  auto t = sched("cosine");
  const double at40 = lr_at(t, 40);  // the trunk's LR at the branch point
  t.cooldown_steps = 20;
  t.cooldown_at = 40;
  for (int64_t s : {0, 9, 25, 39}) EXPECT_DOUBLE_EQ(lr_at(t, s), lr_at(sched("cosine"), s)) << s;
  EXPECT_DOUBLE_EQ(lr_at(t, 40), at40);  // the branch's first step keeps it
  EXPECT_NEAR(lr_at(t, 45), at40 * (1 - 0.25), 1e-12);
  EXPECT_NEAR(lr_at(t, 60), 0.0, 1e-12);
  t.cooldown_shape = CooldownShape::cosine;
  EXPECT_NEAR(lr_at(t, 45), at40 * 0.5 * (1 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_NEAR(lr_at(t, 50), at40 * 0.5, 1e-12);
  t.cooldown_shape = CooldownShape::one_minus_sqrt;
  EXPECT_NEAR(lr_at(t, 45), at40 * (1 - 0.5), 1e-12);
  EXPECT_NEAR(lr_at(t, 59), at40 * (1 - std::sqrt(19.0 / 20.0)), 1e-12);
  EXPECT_EQ(t.end_step(), 60);
  // A WSD trunk in its stable phase: the branch starts at the peak.
  auto wsd = sched("wsd");
  wsd.cooldown_steps = 10;
  wsd.cooldown_at = 50;
  EXPECT_DOUBLE_EQ(lr_at(wsd, 50), 1.0);
  EXPECT_NEAR(lr_at(wsd, 55), 0.5, 1e-12);
}
