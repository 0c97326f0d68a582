// KEEL_FAULT_INJECT's one parser: training faults by kind, step and rank;
// malformed specs plant nothing.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>

#include "util/fault_inject.h"

using keel::TrainFaults;

namespace {

TrainFaults parse(const char* spec, int rank = 0) {
  if (spec) setenv("KEEL_FAULT_INJECT", spec, 1);
  else unsetenv("KEEL_FAULT_INJECT");
  TrainFaults f = TrainFaults::from_environment(rank);
  unsetenv("KEEL_FAULT_INJECT");
  return f;
}

}  // namespace

TEST(FaultInject, TrainingFaultsByKindAndStep) {
  EXPECT_EQ(parse("nan_loss_at_step:5").nan_loss_at_step, 5);
  EXPECT_EQ(parse("loss_x10_at_step:12").loss_x10_at_step, 12);
  EXPECT_TRUE(parse("loss_x10_at_step:12").loss_faults());
  const TrainFaults none = parse(nullptr);
  EXPECT_FALSE(none.loss_faults());
  EXPECT_EQ(none.kill_at_step + none.hang_at_step, 0);
}

TEST(FaultInject, RankFaultsOnlyForThatRank) {
  EXPECT_EQ(parse("kill_rank_at_step:1:7", 1).kill_at_step, 7);
  EXPECT_EQ(parse("kill_rank_at_step:1:7", 0).kill_at_step, 0);
  EXPECT_EQ(parse("hang_rank_at_step:0:3", 0).hang_at_step, 3);
  EXPECT_EQ(parse("hang_rank_at_step:0:3", 0).kill_at_step, 0);
}

TEST(FaultInject, MalformedSpecsPlantNothing) {
  for (const char* bad : {"nan_loss_at_step", "nan_loss_at_step:", "nan_loss_at_step:x", "nan_loss_at_step:-2",
                          "nan_loss_at_step:3x", "kill_rank_at_step:7", "kill_rank_at_step:99999999999999999999:2",
                          ":5", "save_crash_after:rename"}) {
    const TrainFaults f = parse(bad, 0);
    EXPECT_FALSE(f.loss_faults()) << bad;
    EXPECT_EQ(f.kill_at_step + f.hang_at_step, 0) << bad;
  }
}

TEST(FaultInject, SpecSplitsAtTheFirstColon) {
  setenv("KEEL_FAULT_INJECT", "save_crash_after:model.safetensors", 1);
  auto spec = keel::fault_spec();
  unsetenv("KEEL_FAULT_INJECT");
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->point, "save_crash_after");
  EXPECT_EQ(spec->argument, "model.safetensors");
}

// A full disk on one file's appends, after a number of them succeeded.
TEST(FaultInject, EnospcAfterCountsOneFilesAppends) {
  setenv("KEEL_FAULT_INJECT", "enospc_after:metrics.jsonl:3", 1);
  EXPECT_EQ(keel::injected_append_errno("metrics.jsonl", 2), 0);
  EXPECT_EQ(keel::injected_append_errno("metrics.jsonl", 3), ENOSPC);
  EXPECT_EQ(keel::injected_append_errno("spikes.jsonl", 3), 0);
  setenv("KEEL_FAULT_INJECT", "enospc_after:metrics.jsonl:0", 1);
  EXPECT_EQ(keel::injected_append_errno("metrics.jsonl", 0), ENOSPC);
  for (const char* bad : {"enospc_after:metrics.jsonl", "enospc_after:metrics.jsonl:", "enospc_after:metrics.jsonl:-1",
                          "enospc_after:metrics.jsonl:2x", "nan_loss_at_step:3"}) {
    setenv("KEEL_FAULT_INJECT", bad, 1);
    EXPECT_EQ(keel::injected_append_errno("metrics.jsonl", 5), 0) << bad;
  }
  unsetenv("KEEL_FAULT_INJECT");
  EXPECT_EQ(parse("sigterm_at_step:6").sigterm_at_step, 6);
}
