// The edge search (sweep/edge_search.h) on a deterministic stand-in whose
// true edge is known: a run at value v is unstable exactly when v > edge.
// The search must bracket that edge to within its factor, in no more runs
// than its bound, reuse results it is given, and say when the edge lies
// outside the range or is not a single threshold. Then the report's
// grouping over seeds (sweep/edge_report.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "analysis/edge_criteria.h"
#include "analysis/edge_report.h"
#include "analysis/edge_search.h"

using namespace keel;

namespace {

EdgeSearchSpec spec(double low, double high, double factor) {
  EdgeSearchSpec s;
  s.key = "train.lr";
  s.short_name = "lr";
  s.low = low;
  s.high = high;
  s.factor = factor;
  return s;
}

// Runs the search against the stand-in until it asks for nothing more.
std::vector<EdgeProbe> search(const EdgeSearchSpec& s, double edge, std::vector<EdgeProbe> known = {}) {
  for (int guard = 0; guard < 200; ++guard) {
    const std::vector<double> next = next_edge_values(s, known);
    if (next.empty()) return known;
    for (double v : next) {
      for (const auto& k : known) EXPECT_FALSE(same_edge_value(k.value, v)) << "asked twice for " << v;
      known.push_back({v, v > edge});
    }
  }
  ADD_FAILURE() << "the search did not end";
  return known;
}

}  // namespace

TEST(EdgeSearch, FindsAKnownEdgeWithinOneFactor) {
  std::mt19937_64 rng(7);
  for (double factor : {1.1, 1.25, 2.0}) {
    const EdgeSearchSpec s = spec(1e-3, 3.0, factor);
    std::uniform_real_distribution<double> log_edge(std::log(s.low) + 1e-6, std::log(s.high) - 1e-6);
    for (int trial = 0; trial < 200; ++trial) {
      const double edge = std::exp(log_edge(rng));
      const auto known = search(s, edge);
      const EdgeBracket b = edge_bracket(s, known);
      ASSERT_EQ(b.state, EdgeState::found) << "edge " << edge << " factor " << factor;
      EXPECT_LE(b.stable, edge);
      EXPECT_GT(b.unstable, edge);
      EXPECT_LE(b.unstable / b.stable, factor * (1 + 1e-9));
      EXPECT_FALSE(b.non_monotone);
      // Rounding the midpoints to 3 digits may cost one run over the ideal bound.
      EXPECT_LE(known.size(), edge_max_runs(s) + 1) << "edge " << edge;
      EXPECT_LT(known.size(), edge_grid_runs(s));
    }
  }
}

TEST(EdgeSearch, RunCountsOfTheSearchAndOfTheGridItReplaces) {
  EXPECT_EQ(edge_grid_runs(spec(1e-3, 100, 2)), 18u);    // 2^16.6: 17 steps, 18 points
  EXPECT_EQ(edge_max_runs(spec(1e-3, 100, 2)), 7u);      // both ends + ceil(log2(16.6)) = 5
  EXPECT_EQ(edge_grid_runs(spec(1, 4, 2)), 3u);          // 1, 2, 4
  EXPECT_EQ(edge_max_runs(spec(1, 4, 2)), 3u);
  EXPECT_EQ(edge_max_runs(spec(1, 1.5, 2)), 2u);         // the ends alone are within the factor
}

TEST(EdgeSearch, StartsWithBothEndsAtOnce) {
  const EdgeSearchSpec s = spec(1e-2, 1.0, 1.25);
  const auto first = next_edge_values(s, {});
  ASSERT_EQ(first.size(), 2u);
  EXPECT_DOUBLE_EQ(first[0], 1e-2);
  EXPECT_DOUBLE_EQ(first[1], 1.0);
  // With the low end known to train, the high end alone.
  const auto second = next_edge_values(s, {{1e-2, false}});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_DOUBLE_EQ(second[0], 1.0);
  // Both known: the log-midpoint, rounded to 3 digits.
  const auto third = next_edge_values(s, {{1e-2, false}, {1.0, true}});
  ASSERT_EQ(third.size(), 1u);
  EXPECT_DOUBLE_EQ(third[0], 0.1);
}

TEST(EdgeSearch, AnEdgeOutsideTheRangeIsSaidSo) {
  const EdgeSearchSpec s = spec(1e-2, 1.0, 1.25);
  const auto below = search(s, 1e-3);
  EXPECT_EQ(edge_bracket(s, below).state, EdgeState::below_low);
  EXPECT_EQ(below.size(), 2u);
  const auto above = search(s, 5.0);
  EXPECT_EQ(edge_bracket(s, above).state, EdgeState::above_high);
  EXPECT_EQ(above.size(), 2u);
  EXPECT_STREQ(edge_state_name(EdgeState::below_low), "below low");
}

TEST(EdgeSearch, ResultsAlreadyKnownNarrowTheBracketFirst) {
  const EdgeSearchSpec s = spec(1e-3, 10, 1.25);
  const double edge = 0.37;
  const auto fresh = search(s, edge);
  // A grid run before, at half-decades: its results inside the range serve.
  std::vector<EdgeProbe> grid;
  for (double v : {1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0, 3.0, 10.0}) grid.push_back({v, v > edge});
  const auto reused = search(s, edge, grid);
  const size_t new_runs = reused.size() - grid.size();
  EXPECT_LT(new_runs, fresh.size());
  const EdgeBracket b = edge_bracket(s, reused);
  ASSERT_EQ(b.state, EdgeState::found);
  EXPECT_LE(b.stable, edge);
  EXPECT_GT(b.unstable, edge);
  // Bracketed by the grid between 0.3 and 1: the ends of the range are not run.
  for (size_t i = grid.size(); i < reused.size(); ++i) {
    EXPECT_GT(reused[i].value, 0.3);
    EXPECT_LT(reused[i].value, 1.0);
  }
  // Results outside the range are not used.
  const auto outside = next_edge_values(s, {{1e-4, false}, {100, true}});
  EXPECT_EQ(outside.size(), 2u);
}

TEST(EdgeSearch, ASecondEdgeIsFlaggedNonMonotone) {
  const EdgeSearchSpec s = spec(1e-2, 1.0, 1.25);
  // Trains at 0.01, fails at 0.1, trains again at 1.0.
  const EdgeBracket b = edge_bracket(s, {{1e-2, false}, {0.1, true}, {1.0, false}});
  EXPECT_TRUE(b.non_monotone);
  EXPECT_DOUBLE_EQ(b.stable, 1e-2);
  EXPECT_DOUBLE_EQ(b.unstable, 0.1);
  EXPECT_EQ(b.probes, 3u);
}

TEST(EdgeSearch, ValuesAreShortLabelsThatRoundTrip) {
  EXPECT_EQ(edge_value_label(0.316), "0.316");
  EXPECT_EQ(edge_value_label(1e-5), "1e-05");
  EXPECT_EQ(edge_value_label(100), "100");
  EXPECT_EQ(edge_value_label(0.12345), "0.12345");  // more digits when 3 would change it
  EXPECT_DOUBLE_EQ(edge_midpoint(1e-2, 1.0), 0.1);
  EXPECT_DOUBLE_EQ(edge_midpoint(0.1, 1.0), 0.316);
  // A bracket too tight for 3 digits gets more, and stays inside.
  const double mid = edge_midpoint(1.0, 1.001);
  EXPECT_GT(mid, 1.0);
  EXPECT_LT(mid, 1.001);
  EXPECT_TRUE(same_edge_value(std::strtod(edge_value_label(mid).c_str(), nullptr), mid));
}

namespace {

PointRow finished_row(const std::string& name, int64_t seed, bool diverged) {
  PointRow r;
  r.name = name;
  r.seed = seed;
  r.status = diverged ? "diverged" : "completed";
  r.diverged = diverged;
  r.vocab_size = 320;
  r.final_val_loss = diverged ? NAN : 3.0;
  return r;
}

}  // namespace

TEST(EdgeReport, GroupsOverSeedsWithTheGeometricMeanAndAnInterval) {
  nlohmann::json manifest = {
      {"axes", {{{"key", "variant"}, {"short", ""}}, {{"key", "run.seed"}, {"short", "seed"}}}},
      {"search", {{"key", "train.lr"}, {"short", "lr"}, {"low", 0.01}, {"high", 1.0}, {"factor", 2.0},
                  {"criterion", "loss_divergence"}}},
      {"points", nlohmann::json::array()}};
  std::vector<PointRow> rows;
  // Seed 1: trains at 0.1, fails at 0.178; seed 2: trains at 0.178, fails at 0.316.
  const std::vector<std::tuple<std::string, int64_t, std::string, bool>> runs = {
      {"a", 1, "0.01", false}, {"a", 1, "1", true}, {"a", 1, "0.1", false}, {"a", 1, "0.316", true},
      {"a", 1, "0.178", true}, {"a", 2, "0.01", false}, {"a", 2, "1", true}, {"a", 2, "0.1", false},
      {"a", 2, "0.316", true}, {"a", 2, "0.178", false}};
  for (const auto& [variant, seed, lr, diverged] : runs) {
    const std::string name = variant + "_lr=" + lr + "_seed=" + std::to_string(seed);
    manifest["points"].push_back(
        {{"name", name}, {"active", true}, {"labels", {{"variant", variant}, {"train.lr", lr}, {"run.seed", std::to_string(seed)}}}});
    rows.push_back(finished_row(name, seed, diverged));
  }
  EdgeSearchSpec s;
  ASSERT_TRUE(manifest_search(manifest, &s));
  const auto groups = edge_groups(manifest, s, rows);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].group, "a");
  EXPECT_EQ(groups[0].found, 2u);
  EXPECT_EQ(groups[0].runs, 10u);
  EXPECT_NEAR(groups[0].edge, std::sqrt(0.1 * 0.178), 1e-12);
  EXPECT_NEAR(groups[0].interval.lo, 0.1, 1e-12);  // resampling two seeds: both the same, or one of each
  EXPECT_NEAR(groups[0].interval.hi, 0.178, 1e-12);
  std::string csv;
  const std::string md = edge_markdown(s, groups, &csv);
  EXPECT_NE(md.find("| a | 2/2 | 0.133 | 0.1–0.178 | seed 1: 0.1 / 0.178; seed 2: 0.178 / 0.316 | 10 | 16 |"),
            std::string::npos) << md;
  EXPECT_NE(csv.find("a,2,found,0.178,0.316,5,false"), std::string::npos) << csv;
  // A manifest without a usable search has no section.
  manifest["search"]["factor"] = 0.5;
  EXPECT_FALSE(manifest_search(manifest, &s));
}

// Issue 51: the three criteria side by side. One group on a grid of four LRs
// and two seeds, built so that each criterion has its own edge: the
// attention logits fail from 0.03, the loss degrades from 0.1 (more than the
// margin above the best lower run) and blows up at 0.3.
namespace {

PointRow grid_row(int64_t seed, double lr, double loss, bool blown_up, bool logits) {
  PointRow r;
  r.name = "lr=" + edge_value_label(lr) + "_seed=" + std::to_string(seed);
  r.variant = "none";
  r.seed = seed;
  r.lr = lr;
  r.vocab_size = 320;  // ln(320) = 5.77
  r.status = blown_up ? "diverged" : "completed";
  r.diverged = blown_up;
  r.final_val_loss = blown_up ? NAN : loss;
  r.logit_unstable = logits;
  if (logits) r.first_failure = "attention_logits";
  else if (blown_up) r.first_failure = "loss";
  return r;
}

}  // namespace

TEST(EdgeCriteria, EachCriterionFindsItsOwnEdge) {
  std::vector<PointRow> rows;
  for (int64_t seed : {1, 2}) {
    const double d = 0.01 * static_cast<double>(seed);  // seeds differ a little, within the margin
    rows.push_back(grid_row(seed, 0.01, 4.00 + d, false, false));
    rows.push_back(grid_row(seed, 0.03, 3.90 + d, false, true));
    rows.push_back(grid_row(seed, 0.1, 4.20 + d, false, true));   // 0.3 above 3.9: degraded
    rows.push_back(grid_row(seed, 0.3, NAN, true, true));
  }
  // Degradation compares with the best lower run that did not blow up.
  std::vector<const PointRow*> seed1;
  for (const auto& r : rows)
    if (r.seed == 1) seed1.push_back(&r);
  EXPECT_FALSE(run_fails(*seed1[0], "degradation", seed1)) << "no lower run: the lowest is never degraded";
  EXPECT_FALSE(run_fails(*seed1[1], "degradation", seed1));
  EXPECT_TRUE(run_fails(*seed1[2], "degradation", seed1));
  EXPECT_FALSE(run_fails(*seed1[2], "degradation", seed1, /*margin=*/0.5)) << "within a wider margin";
  EXPECT_FALSE(run_fails(*seed1[2], "loss_divergence", seed1));
  EXPECT_TRUE(run_fails(*seed1[3], "degradation", seed1)) << "a blow-up is also degradation";
  EXPECT_TRUE(run_fails(*seed1[1], "logit_instability", seed1));

  const auto groups = criteria_edges(rows);
  ASSERT_EQ(groups.size(), 1u);
  const auto& g = groups[0];
  ASSERT_EQ(g.by_criterion.size(), 3u);
  EXPECT_NEAR(g.by_criterion[0].edge, 0.1, 1e-12);   // loss divergence: trains at 0.1, fails at 0.3
  EXPECT_NEAR(g.by_criterion[1].edge, 0.01, 1e-12);  // logit instability: from 0.03
  EXPECT_NEAR(g.by_criterion[2].edge, 0.03, 1e-12);  // degradation: from 0.1
  for (const auto& e : g.by_criterion) EXPECT_EQ(e.found, 2u);
  EXPECT_EQ(g.first_failures, "attention_logits 6");
  std::string csv;
  const std::string md = criteria_markdown(groups, kDefaultDegradationMargin, &csv);
  EXPECT_NE(md.find("| none | 0.1 (0.1–0.1) [2/2] | 0.01 (0.01–0.01) [2/2] | 0.03 (0.03–0.03) [2/2] | "
                    "attention_logits 6 |"),
            std::string::npos)
      << md;
  EXPECT_NE(csv.find("none,degradation,2,found,0.03,0.1\n"), std::string::npos) << csv;
  // A criterion no run failed lies above the grid; one every run failed, below it.
  for (auto& r : rows) r.logit_unstable = false;
  EXPECT_NE(criteria_markdown(criteria_edges(rows), kDefaultDegradationMargin, &csv).find("above the grid"),
            std::string::npos);
  // One seed brackets the blow-up, the other never blows up: the edge is that
  // seed's, and the cell says the other lies above the grid.
  for (auto& r : rows)
    if (r.seed == 2 && r.lr == 0.3) r.diverged = false, r.final_val_loss = 5.0;
  const std::string mixed = criteria_markdown(criteria_edges(rows), kDefaultDegradationMargin, &csv);
  EXPECT_NE(mixed.find("| none | 0.1 [1/2]; 1 above the grid |"), std::string::npos) << mixed;
  EXPECT_TRUE(is_edge_criterion("degradation"));
  EXPECT_FALSE(is_edge_criterion("loss"));
}
