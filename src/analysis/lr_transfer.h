// How far the best learning rate moves as a model grows (issue 33): for one
// condition of a sweep with a size axis, the least-squares slope of
// log2(best LR) against log2(size) — the drift per doubling of width or
// depth, 0 when the LR transfers, −1 when it halves at every doubling — with
// a percentile-bootstrap interval that resamples the seeds at each (size, LR)
// (docs/papers.md#statistics-for-stability-studies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "analysis/lr_sensitivity.h"
#include "analysis/study_stats.h"

namespace keel {

struct TransferSize {
  double size = 0;                // d_model or n_layers
  double init_loss = 0;           // l0 of lr_sensitivity
  std::vector<LrResult> results;  // every finished run of this size
};

struct LrTransfer {
  std::vector<double> best_lr;  // per size, in the order given (NaN: all diverged)
  double drift = 0;             // slope of log2(best LR) on log2(size); NaN with < 2 defined sizes
  Interval drift_ci{0, 0};      // 95% percentile bootstrap; NaN without repeated seeds
  size_t replicates = 0;        // replicates with a defined slope
  bool at_edge = false;         // a best LR sits on the grid's smallest or largest LR
};

LrTransfer lr_transfer(const std::vector<TransferSize>& sizes, size_t replicates = 2000, uint64_t seed = 20231);

}  // namespace keel
