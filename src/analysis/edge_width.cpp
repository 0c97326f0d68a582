#include "analysis/edge_width.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "util/log.h"

namespace keel {

namespace {

// Geometric mean of positive values; 0 if one is 0, +inf if one is +inf.
double geometric_mean_or_bound(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) {
    if (x == 0) return 0;
    if (std::isinf(x)) return INFINITY;
    s += std::log(x);
  }
  return std::exp(s / static_cast<double>(v.size()));
}

// The range of sum_i c_i y_i over y_i in [lo_i, hi_i] (log2 values, possibly
// infinite): the minimum takes lo where c > 0 and hi where c < 0.
Interval linear_range(const std::vector<double>& c, const std::vector<double>& lo, const std::vector<double>& hi) {
  double mn = 0, mx = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::fabs(c[i]) < 1e-12) continue;  // 0 x inf would be NaN, and this y does not move the value
    mn += c[i] * (c[i] > 0 ? lo[i] : hi[i]);
    mx += c[i] * (c[i] > 0 ? hi[i] : lo[i]);
  }
  return {mn, mx};
}

double log2_or_bound(double v) { return v == 0 ? -INFINITY : std::isinf(v) ? INFINITY : std::log2(v); }

std::string signed_text(double v) {
  if (std::isinf(v)) return v > 0 ? "+∞" : "−∞";
  return std::isfinite(v) ? strf("%+.2f", v) : "-";
}

std::string value_text(double v) {
  if (std::isinf(v)) return "∞";
  return std::isfinite(v) ? strf("%.3g", v) : "-";
}

std::string bound_interval_text(const Interval& i, bool is_signed) {
  if (!(std::isfinite(i.lo) || std::isinf(i.lo))) return "-";
  return is_signed ? signed_text(i.lo) + " to " + signed_text(i.hi) : value_text(i.lo) + "–" + value_text(i.hi);
}

// An edge as the table prints it: "0.03 [0.03, 0.1)", "≥ 0.1", "< 0.003".
std::string range_text(const EdgeRange& r) {
  if (std::isnan(r.lo)) return "-";
  if (std::isinf(r.hi)) return "≥ " + value_text(r.lo);
  if (r.lo == 0) return "< " + value_text(r.hi);
  return value_text(r.point) + " [" + value_text(r.lo) + ", " + value_text(r.hi) + ")";
}

std::string bound_csv_number(double v) { return std::isnan(v) ? "" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : strf("%.6g", v); }

}  // namespace

EdgeRange edge_range(const CriterionEdge& e) {
  std::vector<double> lo, hi;
  bool all_found = !e.brackets.empty();
  for (const auto& b : e.brackets) {
    if (b.state == EdgeState::searching) return {};
    lo.push_back(std::isfinite(b.stable) ? b.stable : 0.0);
    hi.push_back(std::isfinite(b.unstable) ? b.unstable : INFINITY);
    all_found = all_found && b.state == EdgeState::found;
  }
  EdgeRange r;
  r.lo = geometric_mean_or_bound(lo);
  r.hi = geometric_mean_or_bound(hi);
  r.point = all_found ? r.lo : NAN;
  return r;
}

SeedPoints seed_points(const CriterionEdge& e) {
  SeedPoints out;
  for (size_t i = 0; i < e.brackets.size() && i < e.seeds.size(); ++i)
    out[e.seeds[i]] = e.brackets[i].state == EdgeState::found ? e.brackets[i].stable : NAN;
  return out;
}

SeedPoints seed_ratios(const SeedPoints& a, const SeedPoints& b) {
  SeedPoints out;
  for (const auto& [seed, v] : a)
    if (const auto it = b.find(seed); it != b.end()) out[seed] = v / it->second;
  return out;
}

EdgeRange ratio_range(const EdgeRange& a, const EdgeRange& b) {
  EdgeRange r;
  if (std::isnan(a.lo) || std::isnan(b.lo)) return r;
  r.lo = std::isinf(b.hi) || a.lo == 0 ? 0.0 : a.lo / b.hi;
  r.hi = std::isinf(a.hi) || b.lo == 0 ? INFINITY : a.hi / b.lo;
  r.point = a.point / b.point;
  return r;
}

double t_quantile_975(size_t df) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                 2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return NAN;
  if (df <= 30) return table[df - 1];
  // Cornish-Fisher expansion about the normal quantile: within 1e-3 above 30.
  const double z = 1.959964, n = static_cast<double>(df);
  return z + (z * z * z + z) / (4 * n) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n);
}

namespace {

// The slope's and the extrapolation's bootstrap over seeds: each replicate
// draws as many seeds as there are, with replacement, the same draw at every
// width, and refits through each width's geometric mean of the drawn points.
void bootstrap_over_seeds(WidthFit& f, const std::vector<double>& c_slope, const std::vector<double>& c_pred,
                          const std::vector<SeedPoints>& seed_points, size_t replicates, uint64_t rng_seed) {
  if (seed_points.size() != c_slope.size() || seed_points.empty()) return;
  std::vector<int64_t> common;
  for (const auto& [seed, v] : seed_points.front()) {
    bool everywhere = true;
    for (const auto& width : seed_points) {
      const auto it = width.find(seed);
      everywhere = everywhere && it != width.end() && std::isfinite(it->second) && it->second > 0;
    }
    if (everywhere) common.push_back(seed);
  }
  f.seeds = common.size();
  if (common.size() < 2) return;
  // shape: [width][seed] log2 points
  std::vector<std::vector<double>> y(seed_points.size());
  for (size_t i = 0; i < seed_points.size(); ++i)
    for (int64_t s : common) y[i].push_back(std::log2(seed_points[i].at(s)));
  std::mt19937_64 rng(rng_seed);
  std::uniform_int_distribution<size_t> pick(0, common.size() - 1);
  std::vector<size_t> draw(common.size());
  std::vector<double> slopes, ats;
  for (size_t r = 0; r < replicates; ++r) {
    for (auto& d : draw) d = pick(rng);
    double slope = 0, at = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      double mean = 0;  // log2 of the geometric mean
      for (size_t d : draw) mean += y[i][d] / static_cast<double>(draw.size());
      slope += c_slope[i] * mean;
      at += c_pred[i] * mean;
    }
    slopes.push_back(slope);
    ats.push_back(at);
  }
  std::sort(slopes.begin(), slopes.end());
  std::sort(ats.begin(), ats.end());
  f.slope_seeds = {percentile_of_sorted(slopes, 0.025), percentile_of_sorted(slopes, 0.975)};
  f.at_target_seeds = {std::exp2(percentile_of_sorted(ats, 0.025)), std::exp2(percentile_of_sorted(ats, 0.975))};
}

}  // namespace

WidthFit fit_across_width(const std::vector<double>& widths, const std::vector<EdgeRange>& values,
                          double target_width, const std::vector<SeedPoints>& seed_points, size_t replicates,
                          uint64_t rng_seed) {
  WidthFit f;
  f.widths = widths;
  f.values = values;
  f.target_width = target_width;
  const size_t n = widths.size();
  if (n < 2 || values.size() != n) return f;
  std::vector<double> x, lo, hi, y;
  double mean_x = 0;
  for (size_t i = 0; i < n; ++i) {
    x.push_back(std::log2(widths[i]));
    lo.push_back(log2_or_bound(values[i].lo));
    hi.push_back(log2_or_bound(values[i].hi));
    y.push_back(std::log2(values[i].point));  // NaN when the point is missing
    mean_x += x.back() / static_cast<double>(n);
  }
  double sxx = 0;
  for (double xi : x) sxx += (xi - mean_x) * (xi - mean_x);
  if (!(sxx > 0)) return f;
  for (size_t i = 0; i < n; ++i)
    if (std::isnan(lo[i]) || std::isnan(hi[i])) return f;
  const double x_star = std::log2(target_width);
  std::vector<double> c_slope, c_pred;
  for (size_t i = 0; i < n; ++i) {
    c_slope.push_back((x[i] - mean_x) / sxx);
    c_pred.push_back(1.0 / static_cast<double>(n) + (x_star - mean_x) * c_slope.back());
  }
  f.slope_grid = linear_range(c_slope, lo, hi);
  const Interval pred = linear_range(c_pred, lo, hi);
  f.at_target_grid = {std::exp2(pred.lo), std::exp2(pred.hi)};
  double slope = 0, at = 0;
  for (size_t i = 0; i < n; ++i) slope += c_slope[i] * y[i], at += c_pred[i] * y[i];
  if (!std::isfinite(slope)) return f;  // a width's point is missing: the grid ranges stand alone
  f.slope = slope;
  f.at_target = std::exp2(at);
  bootstrap_over_seeds(f, c_slope, c_pred, seed_points, replicates, rng_seed);
  if (n >= 3) {
    const double mean_y = at - (x_star - mean_x) * slope;  // the line passes through (mean x, mean y)
    double ssr = 0;
    for (size_t i = 0; i < n; ++i) {
      const double r = y[i] - (mean_y + slope * (x[i] - mean_x));
      ssr += r * r;
    }
    const double s2 = ssr / static_cast<double>(n - 2), t = t_quantile_975(n - 2);
    const double se_slope = std::sqrt(s2 / sxx);
    const double se_at = std::sqrt(s2 * (1.0 / static_cast<double>(n) + (x_star - mean_x) * (x_star - mean_x) / sxx));
    f.slope_t = {slope - t * se_slope, slope + t * se_slope};
    f.at_target_t = {std::exp2(at - t * se_at), std::exp2(at + t * se_at)};
  }
  return f;
}

std::string width_markdown(const std::vector<PointRow>& rows, const std::vector<CriteriaEdgeRow>& groups,
                           double target_width, std::string* csv) {
  *csv =
      "kind,condition,criterion,width,lo,hi,point,slope,slope_grid_lo,slope_grid_hi,slope_t_lo,slope_t_hi,"
      "target_width,at_target,at_target_grid_lo,at_target_grid_hi,at_target_t_lo,at_target_t_hi,seeds,slope_seed_lo,"
      "slope_seed_hi,at_target_seed_lo,at_target_seed_hi\n";
  // group -> its condition and width; a group whose runs disagree is left out.
  std::map<std::string, std::pair<std::string, int64_t>> where;
  std::map<std::string, std::set<int64_t>> depths;  // condition -> n_layers seen
  std::set<std::string> mixed;
  for (const auto& r : rows) {
    if (r.d_model <= 0) continue;
    const auto it = where.find(r.variant);
    if (it != where.end() && (it->second.first != r.condition || it->second.second != r.d_model)) mixed.insert(r.variant);
    where[r.variant] = {r.condition, r.d_model};
    depths[r.condition].insert(r.n_layers);
  }
  // condition -> width -> its criteria edges, conditions in the groups' order.
  std::vector<std::string> conditions;
  std::map<std::string, std::map<int64_t, const CriteriaEdgeRow*>> by_width;
  std::set<std::string> ambiguous;
  for (const auto& g : groups) {
    const auto it = where.find(g.group);
    if (it == where.end() || mixed.count(g.group)) continue;
    const auto& [condition, width] = it->second;
    if (!by_width.count(condition)) conditions.push_back(condition);
    if (by_width[condition].count(width)) ambiguous.insert(condition);  // two groups at one width: not a width axis
    by_width[condition][width] = &g;
  }
  std::vector<std::string> usable;
  for (const auto& c : conditions)
    if (by_width[c].size() >= 2 && depths[c].size() == 1 && !ambiguous.count(c)) usable.push_back(c);
  if (usable.empty()) return "";
  const auto& names = edge_criterion_names();
  const std::string target = strf("%g", target_width);

  auto fit_of = [&](const std::string& c, size_t criterion, const std::string* over) {
    std::vector<double> widths;
    std::vector<EdgeRange> values;
    std::vector<SeedPoints> seeds;
    for (const auto& [w, g] : by_width[c]) {
      EdgeRange v = edge_range(g->by_criterion[criterion]);
      SeedPoints s = seed_points(g->by_criterion[criterion]);
      if (over) {
        const auto ref = by_width[*over].find(w);
        if (ref == by_width[*over].end()) continue;  // the reference has no run at this width
        v = ratio_range(v, edge_range(ref->second->by_criterion[criterion]));
        s = seed_ratios(s, seed_points(ref->second->by_criterion[criterion]));
      }
      widths.push_back(static_cast<double>(w));
      values.push_back(v);
      seeds.push_back(std::move(s));
    }
    return fit_across_width(widths, values, target_width, seeds);
  };
  auto table_row = [&](const std::string& label, const std::string& kind, const std::string& criterion,
                       const WidthFit& f) {
    std::string per_width;
    for (size_t i = 0; i < f.widths.size(); ++i) {
      per_width += (i ? "; " : "") + strf("d%g ", f.widths[i]) + range_text(f.values[i]);
      *csv += kind + "," + csv_field(label) + "," + criterion + "," + strf("%g", f.widths[i]) + "," +
              bound_csv_number(f.values[i].lo) + "," + bound_csv_number(f.values[i].hi) + "," + bound_csv_number(f.values[i].point) +
              "," + bound_csv_number(f.slope) + "," + bound_csv_number(f.slope_grid.lo) + "," + bound_csv_number(f.slope_grid.hi) + "," +
              bound_csv_number(f.slope_t.lo) + "," + bound_csv_number(f.slope_t.hi) + "," + target + "," +
              bound_csv_number(f.at_target) + "," + bound_csv_number(f.at_target_grid.lo) + "," +
              bound_csv_number(f.at_target_grid.hi) + "," + bound_csv_number(f.at_target_t.lo) + "," +
              bound_csv_number(f.at_target_t.hi) + "," + std::to_string(f.seeds) + "," +
              bound_csv_number(f.slope_seeds.lo) + "," + bound_csv_number(f.slope_seeds.hi) + "," +
              bound_csv_number(f.at_target_seeds.lo) + "," + bound_csv_number(f.at_target_seeds.hi) + "\n";
    }
    return "| " + label + " | " + criterion + " | " + per_width + " | " + signed_text(f.slope) + " | " +
           bound_interval_text(f.slope_grid, true) + " | " + bound_interval_text(f.slope_t, true) + " | " +
           bound_interval_text(f.slope_seeds, true) + " | " + value_text(f.at_target) + " | " +
           bound_interval_text(f.at_target_grid, false) + " | " + bound_interval_text(f.at_target_t, false) + " | " +
           bound_interval_text(f.at_target_seeds, false) + " |\n";
  };
  const std::string header = "| %s | criterion | per width: value [passed, failed) | log2 slope per doubling | "
                             "grid interval | 95%% t-interval | 95%% over seeds | at d" + target +
                             " | grid interval | 95%% t-interval | 95%% over seeds |\n"
                             "|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::string m = "## Stability edge across width\n\n";
  m += "Per condition and criterion (the criteria of the section above), the edge at each width (d_model; depth "
       "fixed), the least-squares slope of log2(edge) on log2(width) and the fitted line extrapolated to d" + target +
       ". On a grid each edge is only known to lie in [largest LR that passed, smallest that failed) (geometric "
       "means over seeds); the **grid interval** is the range of the slope, or of the extrapolation, over every "
       "choice of edges inside those brackets (≥: the widest LR passed; ∞: unbounded). The **95% t-interval** "
       "comes from the points' scatter about the line (n − 2 degrees of freedom; three or more widths) and knows "
       "neither the grid nor seed-to-seed spread. **95% over seeds** is a percentile bootstrap (2000 replicates) "
       "that redraws the seeds bracketed at every width, the same draw at each width, and refits: the spread the "
       "seeds alone put on the fit, not the grid's (two or more such seeds). A slope or extrapolation of '-' means an edge lies outside the "
       "grid at some width: only its grid interval is defined.\n\n";
  m += strf(header.c_str(), "condition");
  for (const auto& c : usable)
    for (size_t k = 0; k < names.size(); ++k) m += table_row(c, "edge", names[k], fit_of(c, k, nullptr));
  const std::string& reference = usable.front();
  if (usable.size() >= 2) {
    m += "\nThe same for each condition's edge divided by **" + reference +
         "**'s (the sweep's first condition) at the same width: a slope above 0 means the advantage grows with "
         "width.\n\n";
    m += strf(header.c_str(), "ratio");
    for (size_t i = 1; i < usable.size(); ++i)
      for (size_t k = 0; k < names.size(); ++k)
        m += table_row(usable[i] + " / " + reference, "ratio", names[k], fit_of(usable[i], k, &reference));
  }
  return m + "\n";
}

}  // namespace keel
