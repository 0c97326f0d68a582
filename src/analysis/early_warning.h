// "What warned first" (docs/sweeps.md#what-warned-first): across a sweep's
// runs, which monitored signal crossed a threshold before the run's loss
// diverged (or its attention logits became unstable), how early, and how
// reliably.
//
// A signal's threshold is relative to the run's own start: the signal
// crosses θ when a value after its baseline window (the first quarter of
// the run's values of that signal, at least one) exceeds θ times the
// baseline's median (floored at kBaselineFloor, so a signal that starts at
// 0 can still cross). For each (signal, θ) over the runs where the signal
// exists:
//   TP  an event run whose signal crossed strictly before the event
//   FN  an event run whose signal crossed at or after it, or never
//   FP  a run without the event whose signal crossed
// precision = TP / (TP + FP), recall = TP / (TP + FN), the lead time is the
// event step minus the crossing step over the TPs, and precision and recall
// get 95% percentile-bootstrap intervals resampling the runs (Efron 1979).
// Signals are ranked by F1 (the harmonic mean of precision and recall),
// then by the median lead.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analysis/study_stats.h"

namespace keel {

constexpr double kBaselineFloor = 1e-6;

struct RunSignals {
  std::string run;
  int64_t event_step = -1;  // -1: the run had no event
  // name -> (step, value) in step order; non-finite values are left out.
  std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> signals;
};

struct WarningRow {
  std::string signal;
  double threshold = 0;  // multiple of the run's baseline
  int64_t runs = 0, events = 0, tp = 0, fp = 0, fn = 0;
  double precision = NAN, recall = NAN, f1 = NAN;
  Interval precision_ci{NAN, NAN}, recall_ci{NAN, NAN};
  double median_lead = NAN, min_lead = NAN, max_lead = NAN;  // steps, over the TPs
};

// The first step after the baseline window where the series exceeds
// threshold × baseline, or -1.
int64_t crossing_step(const std::vector<std::pair<int64_t, double>>& series, double threshold);

// One row per (signal, threshold), ranked best first. `replicates` bootstrap
// resamples with `seed`.
std::vector<WarningRow> early_warning(const std::vector<RunSignals>& runs, const std::vector<double>& thresholds,
                                      uint64_t seed = 1, int replicates = 2000);

}  // namespace keel
