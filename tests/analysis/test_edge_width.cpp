// The stability edge across width (edge_width.h): the fit through the grid's
// edges, its grid interval (every choice inside the brackets), its t-interval,
// and the report section that pairs conditions by width.
#include <cmath>

#include <gtest/gtest.h>

#include "analysis/edge_width.h"
#include "util/log.h"

using namespace keel;

TEST(EdgeWidth, TQuantileMatchesTheTable) {
  EXPECT_NEAR(t_quantile_975(1), 12.706, 1e-3);
  EXPECT_NEAR(t_quantile_975(2), 4.303, 1e-3);
  EXPECT_NEAR(t_quantile_975(30), 2.042, 1e-3);
  EXPECT_NEAR(t_quantile_975(60), 2.000, 2e-3);  // the expansion beyond the table
  EXPECT_NEAR(t_quantile_975(1000000), 1.960, 1e-3);
  EXPECT_TRUE(std::isnan(t_quantile_975(0)));
}

TEST(EdgeWidth, ExactPowerLawHasItsSlopeAndAZeroWidthTInterval) {
  // edge = 0.1 * (64 / d): halves per doubling, slope -1; brackets one grid step of 3x wide.
  const std::vector<double> widths = {64, 128, 256};
  std::vector<EdgeRange> v;
  for (double w : widths) {
    const double e = 0.1 * 64 / w;
    v.push_back({e, 3 * e, e});
  }
  const WidthFit f = fit_across_width(widths, v, 1024);
  EXPECT_NEAR(f.slope, -1.0, 1e-12);
  EXPECT_NEAR(f.at_target, 0.1 * 64 / 1024, 1e-12);
  EXPECT_NEAR(f.slope_t.lo, -1.0, 1e-9);
  EXPECT_NEAR(f.slope_t.hi, -1.0, 1e-9);
  // Grid interval of the slope: coefficients (x - mean)/Sxx = (-1, 0, 1)/2 in
  // log2 width; the lowest slope takes the smallest edge's upper end at d64
  // and its lower end at d256: -1 - log2(3)/2, the highest -1 + log2(3)/2.
  EXPECT_NEAR(f.slope_grid.lo, -1 - std::log2(3.0) / 2, 1e-12);
  EXPECT_NEAR(f.slope_grid.hi, -1 + std::log2(3.0) / 2, 1e-12);
  // The extrapolation lies inside its own grid interval.
  EXPECT_LT(f.at_target_grid.lo, f.at_target);
  EXPECT_GT(f.at_target_grid.hi, f.at_target);
}

TEST(EdgeWidth, ScatterWidensTheTIntervalByTheStudentQuantile) {
  // log2 edges 0, 1, 0 at log2 widths 0, 1, 2: slope 0, residuals (-1/3, 2/3, -1/3).
  const std::vector<double> widths = {1, 2, 4};
  const std::vector<EdgeRange> v = {{1, 2, 1}, {2, 4, 2}, {1, 2, 1}};
  const WidthFit f = fit_across_width(widths, v, 8);
  EXPECT_NEAR(f.slope, 0.0, 1e-12);
  const double ssr = 1.0 / 9 + 4.0 / 9 + 1.0 / 9, se = std::sqrt(ssr / 1 / 2.0);  // Sxx = 2, n - 2 = 1
  EXPECT_NEAR(f.slope_t.hi, 12.706 * se, 1e-9);
  EXPECT_NEAR(f.slope_t.lo, -12.706 * se, 1e-9);
  // Two widths: a line through two points has no t-interval.
  const WidthFit two = fit_across_width({1, 2}, {{1, 2, 1}, {2, 4, 2}}, 8);
  EXPECT_NEAR(two.slope, 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(two.slope_t.lo));
}

TEST(EdgeWidth, AnEdgeAboveTheGridLeavesOnlyAOneSidedGridInterval) {
  // d64 passed the whole grid (>= 0.1): no point slope, and the slope can be
  // anything down to -inf (the d64 edge may be as high as it likes), but it
  // is bounded above by taking d64 at its lowest.
  const std::vector<EdgeRange> v = {{0.1, INFINITY, NAN}, {0.03, 0.1, 0.03}, {0.01, 0.03, 0.01}};
  const WidthFit f = fit_across_width({64, 128, 256}, v, 1024);
  EXPECT_TRUE(std::isnan(f.slope));
  EXPECT_TRUE(std::isnan(f.slope_t.lo));
  EXPECT_EQ(f.slope_grid.lo, -INFINITY);
  const double hi = 0.5 * (std::log2(0.03) - std::log2(0.1));  // d64 at 0.1, d256 at 0.03 (its top)
  EXPECT_NEAR(f.slope_grid.hi, hi, 1e-12);
}

TEST(EdgeWidth, RangesOverSeedsAndRatios) {
  CriterionEdge e;
  EdgeBracket a, b;
  a.state = b.state = EdgeState::found;
  a.stable = 0.01, a.unstable = 0.03;
  b.stable = 0.04, b.unstable = 0.12;
  e.brackets = {a, b};
  const EdgeRange r = edge_range(e);
  EXPECT_NEAR(r.lo, 0.02, 1e-12);
  EXPECT_NEAR(r.hi, 0.06, 1e-12);
  EXPECT_NEAR(r.point, 0.02, 1e-12);
  b.state = EdgeState::above_high, b.stable = 0.1, b.unstable = NAN;
  e.brackets = {a, b};
  const EdgeRange open = edge_range(e);
  EXPECT_EQ(open.hi, INFINITY);
  EXPECT_TRUE(std::isnan(open.point)) << "a seed above the grid: no point edge";
  const EdgeRange q = ratio_range({0.03, 0.1, 0.03}, {0.01, 0.03, 0.01});
  EXPECT_NEAR(q.lo, 1.0, 1e-12);
  EXPECT_NEAR(q.hi, 10.0, 1e-12);
  EXPECT_NEAR(q.point, 3.0, 1e-12);
  const EdgeRange unbounded = ratio_range({0.03, 0.1, 0.03}, {0.1, INFINITY, NAN});
  EXPECT_EQ(unbounded.lo, 0.0);
}

TEST(EdgeWidth, SeedBootstrapSpansTheSeedsOwnFits) {
  // Seed 1's edge halves per doubling (slope -1), seed 2's stays at 0.1
  // (slope 0). With two seeds a replicate draws {1,1} (1/4), {2,2} (1/4) or
  // one of each (1/2): the 2.5th and 97.5th percentiles are the two seeds'
  // own fits, and the fit through the geometric means lies between.
  const std::vector<double> widths = {64, 128, 256};
  std::vector<SeedPoints> seeds(3);
  std::vector<EdgeRange> v;
  for (size_t i = 0; i < widths.size(); ++i) {
    seeds[i][1] = 0.1 * 64 / widths[i];
    seeds[i][2] = 0.1;
    const double g = std::sqrt(seeds[i][1] * seeds[i][2]);
    v.push_back({g, 3 * g, g});
  }
  const WidthFit f = fit_across_width(widths, v, 1024, seeds);
  EXPECT_NEAR(f.slope, -0.5, 1e-12);
  EXPECT_EQ(f.seeds, 2u);
  EXPECT_NEAR(f.slope_seeds.lo, -1.0, 1e-12);
  EXPECT_NEAR(f.slope_seeds.hi, 0.0, 1e-12);
  EXPECT_NEAR(f.at_target_seeds.lo, 0.1 * 64 / 1024, 1e-12);
  EXPECT_NEAR(f.at_target_seeds.hi, 0.1, 1e-12);
  // A seed not bracketed at one width is left out of every width's draw.
  auto with_open = seeds;
  with_open[0][3] = 0.05, with_open[1][3] = NAN, with_open[2][3] = 0.01;
  const WidthFit g = fit_across_width(widths, v, 1024, with_open);
  EXPECT_EQ(g.seeds, 2u);
  EXPECT_EQ(g.slope_seeds.lo, f.slope_seeds.lo);
  EXPECT_EQ(g.slope_seeds.hi, f.slope_seeds.hi);
  // Seeds that agree give no spread; one seed gives no interval.
  std::vector<SeedPoints> same(3);
  for (size_t i = 0; i < 3; ++i) same[i] = {{1, 0.1 * 64 / widths[i]}, {2, 0.1 * 64 / widths[i]}};
  std::vector<EdgeRange> exact;
  for (double w : widths) exact.push_back({0.1 * 64 / w, 0.3 * 64 / w, 0.1 * 64 / w});
  const WidthFit h = fit_across_width(widths, exact, 1024, same);
  EXPECT_NEAR(h.slope_seeds.lo, -1.0, 1e-12);
  EXPECT_NEAR(h.slope_seeds.hi, -1.0, 1e-12);
  std::vector<SeedPoints> one(3);
  for (size_t i = 0; i < 3; ++i) one[i] = {{1, 0.1 * 64 / widths[i]}};
  EXPECT_TRUE(std::isnan(fit_across_width(widths, exact, 1024, one).slope_seeds.lo));
}

TEST(EdgeWidth, SeedPointsAndRatiosPairSeeds) {
  CriterionEdge e;
  EdgeBracket found, above;
  found.state = EdgeState::found, found.stable = 0.01, found.unstable = 0.03;
  above.state = EdgeState::above_high, above.stable = 0.1, above.unstable = NAN;
  e.seeds = {7, 9};
  e.brackets = {found, above};
  const SeedPoints p = seed_points(e);
  EXPECT_EQ(p.at(7), 0.01);
  EXPECT_TRUE(std::isnan(p.at(9))) << "a seed above the grid has no point";
  const SeedPoints r = seed_ratios({{1, 0.03}, {2, 0.1}, {3, 0.3}}, {{1, 0.01}, {2, 0.05}});
  ASSERT_EQ(r.size(), 2u) << "seed 3 has no reference run";
  EXPECT_NEAR(r.at(1), 3.0, 1e-12);
  EXPECT_NEAR(r.at(2), 2.0, 1e-12);
}

namespace {

PointRow width_row(const std::string& condition, int64_t d, double lr, double loss) {
  PointRow r;
  r.condition = condition;
  r.size = "d" + std::to_string(d);
  r.variant = condition + "_size=" + r.size;
  r.name = r.variant + "_lr=" + std::to_string(lr);
  r.d_model = d;
  r.n_layers = 4;
  r.lr = lr;
  r.seed = 1;
  r.vocab_size = 4096;
  r.status = "completed";
  r.final_val_loss = loss;
  return r;
}

}  // namespace

TEST(EdgeWidth, ReportSectionPairsConditionsByWidth) {
  // Without the norm the degradation edge falls from 0.03 (d64) to 0.01
  // (d128, d256); with it, it stays at 0.03: the ratio grows 1x -> 3x.
  std::vector<PointRow> rows;
  const std::vector<double> lrs = {0.01, 0.03, 0.1};
  for (int64_t d : {64, 128, 256}) {
    for (double lr : lrs) {
      const bool none_degraded = d == 64 ? lr > 0.03 : lr > 0.01;
      rows.push_back(width_row("none", d, lr, none_degraded ? 4.5 : 3.5));
      rows.push_back(width_row("qk", d, lr, lr > 0.03 ? 4.5 : 3.4));
    }
  }
  const auto groups = criteria_edges(rows);
  std::string csv;
  const std::string md = width_markdown(rows, groups, 1024, &csv);
  ASSERT_NE(md.find("## Stability edge across width"), std::string::npos) << md;
  EXPECT_NE(md.find("| none | degradation | d64 0.03 [0.03, 0.1); d128 0.01 [0.01, 0.03); d256 0.01 [0.01, 0.03) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| none | loss_divergence | d64 ≥ 0.1; d128 ≥ 0.1; d256 ≥ 0.1 | - |"), std::string::npos) << md;
  EXPECT_NE(md.find("| qk / none | degradation | d64 1 [0.3, 3.33); d128 3 [1, 10); d256 3 [1, 10) |"),
            std::string::npos)
      << md;
  // The ratio's slope: log2 ratios 0, log2 3, log2 3 at log2 widths 6, 7, 8.
  const double slope = std::log2(3.0) / 2;
  EXPECT_NE(md.find(strf("| %+.2f |", slope)), std::string::npos) << md;
  EXPECT_NE(csv.find("ratio,qk / none,degradation,256,1,10,3,"), std::string::npos) << csv;
  // One seed: the bootstrap over seeds has nothing to resample.
  EXPECT_NE(csv.find(",1,,,,\n"), std::string::npos) << csv;
  // A second seed whose edges agree: the interval over seeds collapses onto the slope.
  std::vector<PointRow> two_seeds = rows;
  for (auto r : rows) {
    r.seed = 2;
    two_seeds.push_back(r);
  }
  width_markdown(two_seeds, criteria_edges(two_seeds), 1024, &csv);
  EXPECT_NE(csv.find(strf("ratio,qk / none,degradation,256,1,10,3,%g,", slope)), std::string::npos) << csv;
  EXPECT_NE(csv.find(strf(",2,%g,%g,", slope, slope)), std::string::npos) << csv;
  // A sweep without a width axis has no section.
  std::vector<PointRow> one_width;
  for (const auto& r : rows)
    if (r.d_model == 128) one_width.push_back(r);
  EXPECT_EQ(width_markdown(one_width, criteria_edges(one_width), 1024, &csv), "");
  // Depth varying with width is not a width axis: no section either.
  for (auto& r : rows)
    if (r.d_model == 256) r.n_layers = 8;
  EXPECT_EQ(width_markdown(rows, criteria_edges(rows), 1024, &csv), "");
}
