// Does the stability edge move as the model widens, and does a variant's
// advantage over the reference grow with width? (issue 51; Wortsman et al.
// 2023 Fig. 1: the LR at which a model without qk-layernorm degrades falls
// with width, so the gap grows.) For a sweep whose size axis varies d_model,
// per condition and criterion: the edge at each width, the least-squares
// slope of log2(edge) on log2(width), and the edge extrapolated to a target
// width; and the same for each condition's edge divided by the reference's
// (the sweep's first condition).
//
// On a grid the edge of a width is only known to lie in a bracket [largest LR
// that passed, smallest that failed). A least-squares slope (and any value of
// the fitted line) is linear in the log-edges, so its range over every choice
// of edges inside their brackets is reached at bracket ends: that range is the
// grid interval printed beside the fit. With three or more widths the fit's
// own 95% t-interval (n - 2 degrees of freedom, from the scatter of the
// points about the line) is printed too; it says nothing about the grid, nor
// about seed-to-seed spread. With two or more seeds bracketed at every width,
// a 95% percentile bootstrap over seeds (the same resampled seeds at every
// width, since a seed fixes the data order and the initialisation draw)
// gives the spread the seeds put on the slope and the extrapolation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/edge_criteria.h"
#include "analysis/study_stats.h"

namespace keel {

// Where an edge lies: in [lo, hi); point is the value the fit uses (the
// largest LR that passed), NaN when a seed was not bracketed. lo = 0 when a
// seed failed the whole grid, hi = +inf when one passed it all.
struct EdgeRange {
  double lo = NAN, hi = NAN, point = NAN;
};

// A group's edge over its seeds: geometric means of the seeds' bracket ends.
EdgeRange edge_range(const CriterionEdge& e);
// a / b: [a.lo / b.hi, a.hi / b.lo), point a.point / b.point.
EdgeRange ratio_range(const EdgeRange& a, const EdgeRange& b);

struct WidthFit {
  std::vector<double> widths;
  std::vector<EdgeRange> values;
  double slope = NAN;                    // of log2(value) on log2(width) through the points; NaN if one is missing
  Interval slope_grid{NAN, NAN};         // over every choice inside the brackets (may be infinite)
  Interval slope_t{NAN, NAN};            // 95% t-interval from the residuals; NaN below three widths
  double target_width = NAN;
  double at_target = NAN;                // the fitted line at target_width
  Interval at_target_grid{NAN, NAN};     // over every choice inside the brackets
  Interval at_target_t{NAN, NAN};        // 95% t prediction of the line's mean at target_width
  Interval slope_seeds{NAN, NAN};        // 95% percentile bootstrap over seeds; NaN below two common seeds
  Interval at_target_seeds{NAN, NAN};
  size_t seeds = 0;                      // seeds bracketed at every width (the bootstrap's population)
};

// One width's edge point per seed (the largest LR that passed; NaN where the
// seed was not bracketed): the bootstrap's input.
using SeedPoints = std::map<int64_t, double>;

// Needs two or more distinct widths; values are positive ranges as above.
// seed_points, when given, holds one map per width (values' order); only
// seeds with a finite point at every width are resampled.
WidthFit fit_across_width(const std::vector<double>& widths, const std::vector<EdgeRange>& values,
                          double target_width, const std::vector<SeedPoints>& seed_points = {},
                          size_t replicates = 2000, uint64_t rng_seed = 20231);

// Each seed's point of a criterion's edge (edge_range's per seed).
SeedPoints seed_points(const CriterionEdge& e);
// a / b seed by seed, over the seeds both have.
SeedPoints seed_ratios(const SeedPoints& a, const SeedPoints& b);

// The two-sided 95% quantile of Student's t with `df` degrees of freedom
// (12.71 at 1, 4.30 at 2, ... 1.96 in the limit); NaN for df < 1.
double t_quantile_975(size_t df);

// keel report's "Stability edge across width" section: per condition and
// criterion, and per condition over the reference, with a CSV row each.
// Empty unless some condition has two or more widths (d_model) at one depth.
std::string width_markdown(const std::vector<PointRow>& rows, const std::vector<CriteriaEdgeRow>& groups,
                           double target_width, std::string* csv);

// The width the extrapolation aims at by default: Rybakov et al. 2024's
// 830M model (hidden 1024), the table issue 51 compares with.
constexpr double kDefaultTargetWidth = 1024;

}  // namespace keel
