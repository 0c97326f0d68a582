#include "analysis/early_warning.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace keel {

int64_t crossing_step(const std::vector<std::pair<int64_t, double>>& series, double threshold) {
  if (series.size() < 2) return -1;
  const size_t window = std::max<size_t>(1, series.size() / 4);
  std::vector<double> base;
  for (size_t i = 0; i < window; ++i) base.push_back(series[i].second);
  std::sort(base.begin(), base.end());
  const double baseline = std::max(std::fabs(percentile_of_sorted(base, 0.5)), kBaselineFloor);
  for (size_t i = window; i < series.size(); ++i)
    if (series[i].second > threshold * baseline) return series[i].first;
  return -1;
}

namespace {

// Per run of one (signal, threshold): 0 TN, 1 TP, 2 FN, 3 FP; lead for TPs.
struct Outcome {
  int kind = 0;
  double lead = NAN;
};

struct Counts {
  int64_t tp = 0, fp = 0, fn = 0;
  double precision() const { return tp + fp > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fp) : NAN; }
  double recall() const { return tp + fn > 0 ? static_cast<double>(tp) / static_cast<double>(tp + fn) : NAN; }
};

Counts count(const std::vector<Outcome>& outcomes) {
  Counts c;
  for (const auto& o : outcomes) {
    c.tp += o.kind == 1;
    c.fn += o.kind == 2;
    c.fp += o.kind == 3;
  }
  return c;
}

Interval percentile_interval(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }), values.end());
  if (values.empty()) return {NAN, NAN};
  std::sort(values.begin(), values.end());
  return {percentile_of_sorted(values, 0.025), percentile_of_sorted(values, 0.975)};
}

}  // namespace

std::vector<WarningRow> early_warning(const std::vector<RunSignals>& runs, const std::vector<double>& thresholds,
                                      uint64_t seed, int replicates) {
  std::map<std::string, bool> names;  // every signal any run has
  for (const auto& r : runs)
    for (const auto& s : r.signals) names[s.first] = true;
  std::vector<WarningRow> rows;
  for (const auto& entry : names)
    for (double threshold : thresholds) {
      const std::string& name = entry.first;
      std::vector<Outcome> outcomes;
      WarningRow row;
      row.signal = name;
      row.threshold = threshold;
      std::vector<double> leads;
      for (const auto& r : runs) {
        const auto it = std::find_if(r.signals.begin(), r.signals.end(), [&](const auto& s) { return s.first == name; });
        if (it == r.signals.end()) continue;  // this run did not log the signal
        const int64_t cross = crossing_step(it->second, threshold);
        Outcome o;
        if (r.event_step >= 0) {
          ++row.events;
          if (cross >= 0 && cross < r.event_step) {
            o.kind = 1;
            o.lead = static_cast<double>(r.event_step - cross);
            leads.push_back(o.lead);
          } else {
            o.kind = 2;
          }
        } else {
          o.kind = cross >= 0 ? 3 : 0;
        }
        outcomes.push_back(o);
      }
      row.runs = static_cast<int64_t>(outcomes.size());
      if (row.runs == 0) continue;
      const Counts c = count(outcomes);
      row.tp = c.tp;
      row.fp = c.fp;
      row.fn = c.fn;
      row.precision = c.precision();
      row.recall = c.recall();
      row.f1 = std::isfinite(row.precision) && std::isfinite(row.recall) && row.precision + row.recall > 0
                   ? 2 * row.precision * row.recall / (row.precision + row.recall)
                   : (row.tp == 0 && row.events > 0 ? 0.0 : NAN);
      if (!leads.empty()) {
        std::sort(leads.begin(), leads.end());
        row.median_lead = percentile_of_sorted(leads, 0.5);
        row.min_lead = leads.front();
        row.max_lead = leads.back();
      }
      // Bootstrap over runs: resample the outcomes with replacement.
      std::mt19937_64 rng(seed ^ std::hash<std::string>{}(name) ^ static_cast<uint64_t>(threshold * 1000));
      std::uniform_int_distribution<size_t> pick(0, outcomes.size() - 1);
      std::vector<double> precisions, recalls;
      std::vector<Outcome> sample(outcomes.size());
      for (int b = 0; b < replicates; ++b) {
        for (auto& s : sample) s = outcomes[pick(rng)];
        const Counts bc = count(sample);
        precisions.push_back(bc.precision());
        recalls.push_back(bc.recall());
      }
      row.precision_ci = percentile_interval(precisions);
      row.recall_ci = percentile_interval(recalls);
      rows.push_back(row);
    }
  std::stable_sort(rows.begin(), rows.end(), [](const WarningRow& a, const WarningRow& b) {
    const double fa = std::isfinite(a.f1) ? a.f1 : -1, fb = std::isfinite(b.f1) ? b.f1 : -1;
    if (fa != fb) return fa > fb;
    const double la = std::isfinite(a.median_lead) ? a.median_lead : -1, lb = std::isfinite(b.median_lead) ? b.median_lead : -1;
    return la > lb;
  });
  return rows;
}

}  // namespace keel
