// sweep/early_warning.h on synthetic sweeps: a planted signal that rises a
// known number of steps before a planted divergence is found with that lead,
// precision and recall 1 and ranked first; a signal that rises only after
// the divergence, or in runs that never diverge, is not.
#include <gtest/gtest.h>

#include <stdexcept>

#include "analysis/early_warning.h"

using namespace keel;

namespace {

// A flat series of `value` every 10 steps up to `last`, jumping to value × jump from step `from` (if >= 0).
std::vector<std::pair<int64_t, double>> series(int64_t last, double value, int64_t from, double jump) {
  std::vector<std::pair<int64_t, double>> out;
  for (int64_t s = 10; s <= last; s += 10) out.emplace_back(s, from >= 0 && s >= from ? value * jump : value);
  return out;
}

// 6 runs diverging at step 300 + 10 i, 6 that never do. "warns" rises 10x
// 50 steps before each divergence; "late" rises 10x 20 steps after it;
// "noise" rises 10x at step 200 in every other run, whatever happens.
std::vector<RunSignals> synthetic_sweep() {
  std::vector<RunSignals> runs;
  for (int i = 0; i < 12; ++i) {
    RunSignals r;
    r.run = "run" + std::to_string(i);
    const bool diverges = i < 6;
    const int64_t event = 300 + 10 * i, end = diverges ? event + 30 : 500;
    r.event_step = diverges ? event : -1;
    r.signals.push_back({"warns", series(end, 2.0, diverges ? event - 50 : -1, 10)});
    r.signals.push_back({"late", series(end, 1.0, diverges ? event + 20 : -1, 10)});
    r.signals.push_back({"noise", series(end, 3.0, i % 2 == 0 ? 200 : -1, 10)});
    runs.push_back(r);
  }
  return runs;
}

const WarningRow& find(const std::vector<WarningRow>& rows, const std::string& signal, double threshold) {
  for (const auto& r : rows)
    if (r.signal == signal && r.threshold == threshold) return r;
  throw std::runtime_error("no row " + signal);
}

}  // namespace

TEST(EarlyWarning, PlantedPrecursorIsFoundWithItsLead) {
  const auto rows = early_warning(synthetic_sweep(), {2.0, 5.0, 20.0});
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_EQ(rows[0].signal, "warns");
  const auto& w = find(rows, "warns", 5.0);
  EXPECT_EQ(w.runs, 12);
  EXPECT_EQ(w.events, 6);
  EXPECT_EQ(w.tp, 6);
  EXPECT_EQ(w.fp, 0);
  EXPECT_DOUBLE_EQ(w.precision, 1.0);
  EXPECT_DOUBLE_EQ(w.recall, 1.0);
  EXPECT_DOUBLE_EQ(w.median_lead, 50.0);
  EXPECT_DOUBLE_EQ(w.min_lead, 50.0);
  EXPECT_DOUBLE_EQ(w.precision_ci.lo, 1.0);
  // Above the jump (20x): it never crosses, so it warns of nothing.
  EXPECT_EQ(find(rows, "warns", 20.0).tp, 0);
  EXPECT_DOUBLE_EQ(find(rows, "warns", 20.0).recall, 0.0);
}

TEST(EarlyWarning, SignalsThatDoNotPrecedeAreNotCredited) {
  const auto rows = early_warning(synthetic_sweep(), {5.0});
  const auto& late = find(rows, "late", 5.0);  // crosses after every divergence
  EXPECT_EQ(late.tp, 0);
  EXPECT_EQ(late.fn, 6);
  EXPECT_DOUBLE_EQ(late.recall, 0.0);
  EXPECT_TRUE(std::isnan(late.median_lead));
  const auto& noise = find(rows, "noise", 5.0);  // before some divergences, and in runs that never diverge
  EXPECT_EQ(noise.tp, 3);
  EXPECT_EQ(noise.fp, 3);
  EXPECT_DOUBLE_EQ(noise.precision, 0.5);
  EXPECT_DOUBLE_EQ(noise.recall, 0.5);
  EXPECT_LT(noise.precision_ci.lo, 0.5);
  EXPECT_GT(noise.precision_ci.hi, 0.5);
  EXPECT_EQ(rows.front().signal, "warns");
  EXPECT_EQ(rows.back().signal, "late");
}

TEST(EarlyWarning, CrossingIsRelativeToTheRunsOwnStart) {
  // Baseline: the first quarter's median (2.0); the crossing is the first later value above θ × 2.
  std::vector<std::pair<int64_t, double>> s = {{1, 2}, {2, 2}, {3, 3}, {4, 5}, {5, 9}, {6, 1}, {7, 30}, {8, 2}};
  EXPECT_EQ(crossing_step(s, 2.0), 4);
  EXPECT_EQ(crossing_step(s, 4.0), 5);
  EXPECT_EQ(crossing_step(s, 10.0), 7);
  EXPECT_EQ(crossing_step(s, 20.0), -1);
  // A signal that starts at 0 crosses against the floor.
  EXPECT_EQ(crossing_step({{1, 0}, {2, 0}, {3, 0.5}}, 10.0), 3);
  EXPECT_EQ(crossing_step({{1, 5}}, 2.0), -1);  // one value: no baseline and nothing after it
}
