// LR sensitivity of Wortsman et al. 2023 ("Small-scale proxies for
// large-scale Transformer training instabilities";
// docs/papers.md#small-scale-proxies-and-lr-sensitivity):
//
//   mean over the LR grid of [ min(l(eta), l0) - l* ]
//
// l(eta): final loss at peak learning rate eta; l0: loss at initialization;
// l*: best final loss over the grid. A point whose loss diverged (non-finite,
// exploding, or a final loss at or above l0) counts as l0; any other point
// counts with its real final loss, whatever its attention logits did. Lower is better (less sensitive); read it
// together with the loss-vs-LR curve.
#pragma once

#include <cstddef>
#include <vector>

namespace keel {

struct LrResult {
  double lr;
  double final_loss;  // NaN when the run has none
  bool diverged;
};

struct LrSensitivity {
  double sensitivity;    // NaN when no grid point has a loss below l0 (all diverged)
  double best_loss;      // l*: min over the grid of min(l(eta), l0)
  double best_lr;        // the LR where l* is reached (the smaller one on a tie); NaN if all diverged
  double max_stable_lr;  // largest LR none of whose runs diverged; NaN if none
  size_t grid_points;    // distinct learning rates
  size_t diverged;       // results counted as l0: loss diverged, no finite loss, or final loss >= l0
};

// Several results at one LR (seeds) are averaged after capping at l0.
LrSensitivity lr_sensitivity(const std::vector<LrResult>& results, double init_loss);

}  // namespace keel
