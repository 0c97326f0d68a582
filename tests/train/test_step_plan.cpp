// StepPlan: the once-in-a-while decisions of a step, from the config's
// cadences, in one place.
#include <gtest/gtest.h>

#include <cmath>

#include "train/device_counters.h"
#include "train/step_plan.h"

using keel::Config;
using keel::plan_step;

namespace {

Config cadences() {
  Config c;
  c.train.max_steps = 30;
  c.train.log_every = 5;
  c.train.eval_every = 10;
  c.monitor.every = 4;
  c.checkpoint.every = 6;
  c.checkpoint.at_end = true;
  return c;
}

}  // namespace

TEST(StepPlan, EachCadenceOnItsSteps) {
  const Config c = cadences();
  for (int64_t index = 0; index < c.train.max_steps; ++index) {
    const auto p = plan_step(c, index, /*cpu=*/false, /*has_val=*/true);
    const int64_t s = index + 1;
    SCOPED_TRACE(s);
    EXPECT_EQ(p.step, s);
    EXPECT_EQ(p.last, s == 30);
    EXPECT_EQ(p.eval, s % 10 == 0 || s == 30);
    EXPECT_EQ(p.monitor, s % 4 == 0);
    // A record whenever something is to be recorded: log cadence, eval, monitor, the end.
    EXPECT_EQ(p.log, s % 5 == 0 || s % 10 == 0 || s % 4 == 0 || s == 30);
    EXPECT_EQ(p.checkpoint, s % 6 == 0 || s == 30);
    // On CUDA the host reads the device only on log-cadence steps and the last.
    EXPECT_EQ(p.host_sync, s % 5 == 0 || s == 30);
    EXPECT_EQ(p.drain_spikes, p.log || p.checkpoint);
  }
}

TEST(StepPlan, CpuSyncsEveryStepAndNoValidationMeansNoEval) {
  Config c = cadences();
  for (int64_t index = 0; index < c.train.max_steps; ++index) {
    const auto p = plan_step(c, index, /*cpu=*/true, /*has_val=*/false);
    EXPECT_TRUE(p.host_sync);
    EXPECT_FALSE(p.eval);
  }
  c.checkpoint.at_end = false;
  c.checkpoint.every = 7;  // 30 is not a multiple: only at_end could save it
  EXPECT_FALSE(plan_step(c, 29, true, true).checkpoint);
  EXPECT_TRUE(plan_step(c, 27, true, true).checkpoint);
  c.monitor.every = 0;  // off
  EXPECT_FALSE(plan_step(c, 3, true, true).monitor);
}

// The stop vote's cadence on CUDA under data parallelism (issue 20, defect
// 10): at most bound_s apart however slow a step, never more often than every
// step, never rarer than log_every.
TEST(VoteCadence, VotesAtMostBoundSecondsApart) {
  using keel::VoteCadence;
  EXPECT_EQ(VoteCadence::steps_between(2.0, 5.0, 100), 2);    // 2 s steps: every 2nd step (4 s)
  EXPECT_EQ(VoteCadence::steps_between(30.0, 5.0, 100), 1);   // slower than the bound: every step
  EXPECT_EQ(VoteCadence::steps_between(0.01, 5.0, 100), 100);  // fast: log_every's own syncs suffice
  EXPECT_EQ(VoteCadence::steps_between(0.0, 5.0, 10), 10);     // not measured yet
  EXPECT_EQ(VoteCadence::steps_between(NAN, 5.0, 10), 10);
  VoteCadence c(/*log_every=*/50, /*bound_s=*/5.0);
  EXPECT_TRUE(c.due(1));  // the first step votes and measures
  c.voted(1, 1.5);        // 1.5 s per step: 3 steps fit in 5 s
  EXPECT_FALSE(c.due(2));
  EXPECT_FALSE(c.due(3));
  EXPECT_TRUE(c.due(4));
  c.voted(4, 20.0);
  EXPECT_TRUE(c.due(5));
}

// A stop between records gets a stop record, which leaves the logging
// interval open (issue 31); a stop on a logging step keeps the regular record.
TEST(StepPlan, StopForcesRecordCheckpointAndSpikes) {
  auto p = plan_step(cadences(), 0, false, true);
  EXPECT_FALSE(p.log || p.stop_record || p.checkpoint || p.drain_spikes);
  p.stop();
  EXPECT_TRUE(p.stop_record && p.checkpoint && p.drain_spikes);
  EXPECT_FALSE(p.log);
  auto on_log_step = plan_step(cadences(), 4, false, true);  // step 5: log_every
  ASSERT_TRUE(on_log_step.log);
  on_log_step.stop();
  EXPECT_TRUE(on_log_step.log && on_log_step.checkpoint);
  EXPECT_FALSE(on_log_step.stop_record);
}

// One buffer, one read: sums over the interval, the last gradient norm, the
// run's non-finite count (kept across intervals).
TEST(DeviceCounters, SumsLastNormAndRunCount) {
  keel::DeviceCounters c(torch::kCPU);
  auto t = [](double v) { return torch::tensor(v, torch::kFloat32); };
  c.add_step(t(2.0), t(0.5), t(3.0), t(0.0));
  c.add_step(t(4.0), t(0.25), t(1.5), t(1.0));
  c.add_qk_clipped(torch::tensor(3, torch::kInt64));
  auto v = c.read();
  EXPECT_DOUBLE_EQ(v.loss_sum, 6.0);
  EXPECT_DOUBLE_EQ(v.z_sum, 0.75);
  EXPECT_DOUBLE_EQ(v.grad_norm, 1.5);
  EXPECT_EQ(v.nonfinite_steps, 1);
  EXPECT_DOUBLE_EQ(v.qk_clipped_heads, 3.0);
  c.reset_interval();
  v = c.read();
  EXPECT_DOUBLE_EQ(v.loss_sum, 0.0);
  EXPECT_DOUBLE_EQ(v.qk_clipped_heads, 0.0);
  EXPECT_EQ(v.nonfinite_steps, 1);
  c.set_nonfinite_steps(7);
  EXPECT_EQ(c.read().nonfinite_steps, 7);
}
