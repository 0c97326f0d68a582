#include "analysis/study_stats.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace keel {

Interval wilson_interval(int64_t k, int64_t n, double z) {
  if (n <= 0 || k < 0 || k > n) return {NAN, NAN};
  const double nn = static_cast<double>(n), p = static_cast<double>(k) / nn, z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

MeanSd mean_sd(const std::vector<double>& values) {
  double sum = 0;
  size_t n = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, ++n;
  if (n == 0) return {NAN, NAN, 0};
  const double mean = sum / static_cast<double>(n);
  if (n < 2) return {mean, NAN, n};
  double ss = 0;
  for (double v : values)
    if (std::isfinite(v)) ss += (v - mean) * (v - mean);
  return {mean, std::sqrt(ss / static_cast<double>(n - 1)), n};
}

double percentile_of_sorted(const std::vector<double>& sorted, double q) {
  const size_t i = static_cast<size_t>(std::clamp(std::ceil(q * static_cast<double>(sorted.size())) - 1.0, 0.0,
                                                  static_cast<double>(sorted.size() - 1)));
  return sorted[i];
}

SensitivityIntervals bootstrap_lr_sensitivity(const std::vector<LrResult>& results, double init_loss,
                                              size_t replicates, uint64_t seed) {
  std::map<double, std::vector<LrResult>> by_lr;
  for (const auto& r : results) by_lr[r.lr].push_back(r);
  bool repeated = false;
  for (const auto& [lr, group] : by_lr) repeated |= group.size() >= 2;
  SensitivityIntervals out{{NAN, NAN}, {NAN, NAN}, 0};
  if (!repeated) return out;
  std::mt19937_64 rng(seed);
  std::vector<double> sens, best;
  std::vector<LrResult> sample;
  for (size_t b = 0; b < replicates; ++b) {
    sample.clear();
    for (const auto& [lr, group] : by_lr) {
      std::uniform_int_distribution<size_t> pick(0, group.size() - 1);
      for (size_t i = 0; i < group.size(); ++i) sample.push_back(group[pick(rng)]);
    }
    const LrSensitivity s = lr_sensitivity(sample, init_loss);
    if (!std::isfinite(s.sensitivity)) continue;
    sens.push_back(s.sensitivity);
    best.push_back(s.best_lr);
  }
  out.replicates = sens.size();
  if (sens.empty()) return out;
  std::sort(sens.begin(), sens.end());
  std::sort(best.begin(), best.end());
  out.sensitivity = {percentile_of_sorted(sens, 0.025), percentile_of_sorted(sens, 0.975)};
  out.best_lr = {percentile_of_sorted(best, 0.025), percentile_of_sorted(best, 0.975)};  // grid values themselves
  return out;
}

}  // namespace keel
