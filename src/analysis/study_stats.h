// How sure a stability study is (docs/papers.md#statistics-for-stability-studies):
// a 95% Wilson score interval for a divergence frequency k/N (Wilson 1927),
// mean and standard deviation over seeds, and percentile-bootstrap intervals
// (Efron 1979) for the LR sensitivity and the best LR of a variant, resampling
// the seeds at each learning rate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "analysis/lr_sensitivity.h"

namespace keel {

struct Interval {
  double lo, hi;  // NaN, NaN when undefined
};

// Wilson score interval for k of n at normal quantile z (1.96: 95%); NaN for n = 0.
Interval wilson_interval(int64_t k, int64_t n, double z = 1.96);

// Nearest-rank percentile of ascending, non-empty `sorted`, q in [0, 1].
double percentile_of_sorted(const std::vector<double>& sorted, double q);

struct MeanSd {
  double mean, sd;  // sd: sample standard deviation (n - 1); NaN below 2 values
  size_t n;         // finite values used
};
MeanSd mean_sd(const std::vector<double>& values);  // non-finite values are left out

struct SensitivityIntervals {
  Interval sensitivity;  // 95% percentile bootstrap of the LR sensitivity
  Interval best_lr;      // of the best LR (grid values: order statistics of the replicates' best LRs)
  size_t replicates;     // bootstrap replicates whose sensitivity was finite
};
// Resamples, `replicates` times, each learning rate's results with
// replacement (as many as it has) and recomputes lr_sensitivity. Seeded, so
// a report regenerates the same intervals. Undefined (NaN) unless some LR
// has at least two results.
SensitivityIntervals bootstrap_lr_sensitivity(const std::vector<LrResult>& results, double init_loss,
                                              size_t replicates = 2000, uint64_t seed = 20231);

}  // namespace keel
