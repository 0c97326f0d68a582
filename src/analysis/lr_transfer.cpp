#include "analysis/lr_transfer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace keel {

namespace {

// Least-squares slope of log2(y) on log2(x) over the finite pairs.
double log2_slope(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(std::isfinite(y[i]) && y[i] > 0 && x[i] > 0)) continue;
    const double a = std::log2(x[i]), b = std::log2(y[i]);
    sx += a, sy += b, sxx += a * a, sxy += a * b, ++n;
  }
  const double den = n * sxx - sx * sx;
  return n >= 2 && den > 0 ? (n * sxy - sx * sy) / den : NAN;
}

}  // namespace

LrTransfer lr_transfer(const std::vector<TransferSize>& sizes, size_t replicates, uint64_t seed) {
  LrTransfer out;
  std::vector<double> xs;
  double lo = INFINITY, hi = -INFINITY;
  bool repeated = false;
  std::vector<std::map<double, std::vector<LrResult>>> by_lr(sizes.size());
  for (size_t s = 0; s < sizes.size(); ++s) {
    xs.push_back(sizes[s].size);
    out.best_lr.push_back(lr_sensitivity(sizes[s].results, sizes[s].init_loss).best_lr);
    for (const auto& r : sizes[s].results) {
      lo = std::min(lo, r.lr), hi = std::max(hi, r.lr);
      auto& group = by_lr[s][r.lr];
      group.push_back(r);
      repeated |= group.size() >= 2;
    }
  }
  for (double b : out.best_lr) out.at_edge |= std::isfinite(b) && (b == lo || b == hi);
  out.drift = log2_slope(xs, out.best_lr);
  out.drift_ci = {NAN, NAN};
  if (!repeated || !std::isfinite(out.drift)) return out;
  std::mt19937_64 rng(seed);
  std::vector<double> slopes, best(sizes.size());
  std::vector<LrResult> sample;
  for (size_t b = 0; b < replicates; ++b) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      sample.clear();
      for (const auto& [lr, group] : by_lr[s]) {
        std::uniform_int_distribution<size_t> pick(0, group.size() - 1);
        for (size_t i = 0; i < group.size(); ++i) sample.push_back(group[pick(rng)]);
      }
      best[s] = lr_sensitivity(sample, sizes[s].init_loss).best_lr;
    }
    const double slope = log2_slope(xs, best);
    if (std::isfinite(slope)) slopes.push_back(slope);
  }
  out.replicates = slopes.size();
  if (slopes.empty()) return out;
  std::sort(slopes.begin(), slopes.end());
  out.drift_ci = {percentile_of_sorted(slopes, 0.025), percentile_of_sorted(slopes, 0.975)};
  return out;
}

}  // namespace keel
