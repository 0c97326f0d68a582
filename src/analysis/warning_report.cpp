#include "analysis/warning_report.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "util/fs.h"
#include "util/log.h"

namespace keel {

const std::vector<double> kWarningThresholds = {1.5, 2, 5, 10, 100};

namespace {

bool is_number(const nlohmann::json& j) { return j.is_number() && std::isfinite(j.get<double>()); }

// The largest finite `key` over the values of object `obj` (each an object), or NaN.
double max_over(const nlohmann::json& obj, const char* key, const std::string& prefix = "") {
  double best = NAN;
  if (!obj.is_object()) return best;
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!prefix.empty() && it.key().rfind(prefix, 0) != 0) continue;
    const auto& v = it.value();
    if (v.is_object() && v.contains(key) && is_number(v[key]))
      best = std::isfinite(best) ? std::max(best, v[key].get<double>()) : v[key].get<double>();
  }
  return best;
}

std::string interval_cell(double v, const Interval& ci) {
  if (!std::isfinite(v)) return "-";
  return std::isfinite(ci.lo) ? strf("%.2f (%.2f–%.2f)", v, ci.lo, ci.hi) : strf("%.2f", v);
}

}  // namespace

RunSignals read_run_signals(const std::string& run_dir, const std::string& name, int64_t event_step) {
  RunSignals out;
  out.run = name;
  out.event_step = event_step;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> series;
  for_each_log_record(run_dir + "/metrics.jsonl", [&](const nlohmann::json& rec) {
    if (rec.contains("stop")) return;
    const int64_t step = rec["step"].get<int64_t>();
    auto add = [&](const std::string& signal, double v) {
      if (std::isfinite(v)) series[signal].emplace_back(step, v);
    };
    for (const char* key : {"loss", "grad_norm", "update_ratio", "update_norm"})
      if (rec.contains(key) && is_number(rec[key])) add(key, rec[key].get<double>());
    if (rec.contains("attn") && rec["attn"].is_array() && !rec["attn"].empty()) {
      const auto& attn = rec["attn"];
      if (attn[0].is_object() && attn[0].contains("max_logit") && is_number(attn[0]["max_logit"]))
        add("attn_l0_max_logit", attn[0]["max_logit"].get<double>());
      double m = NAN;
      for (const auto& layer : attn)
        if (layer.is_object() && layer.contains("max_logit") && is_number(layer["max_logit"]))
          m = std::isfinite(m) ? std::max(m, layer["max_logit"].get<double>()) : layer["max_logit"].get<double>();
      add("attn_max_logit", m);
    }
    if (rec.contains("output") && rec["output"].is_object() && rec["output"].contains("max_logit") &&
        is_number(rec["output"]["max_logit"]))
      add("output_max_logit", rec["output"]["max_logit"].get<double>());
    if (rec.contains("params") && rec["params"].is_object()) {
      const auto& params = rec["params"];
      add("update_ratio_max", max_over(params, "update_ratio"));
      add("update_ratio_block0_max", max_over(params, "update_ratio", "blocks.0."));
      double sum = 0;
      int n = 0;
      for (auto it = params.begin(); it != params.end(); ++it)
        if (it.value().is_object() && it.value().contains("v_below_eps") && is_number(it.value()["v_below_eps"])) {
          sum += it.value()["v_below_eps"].get<double>();
          ++n;
        }
      if (n > 0) add("v_below_eps_mean", sum / n);
    }
    if (rec.contains("activations")) add("activation_max_abs", max_over(rec["activations"], "max_abs"));
  });
  for (auto& [signal, points] : series) out.signals.emplace_back(signal, std::move(points));
  return out;
}

std::string warning_markdown(const std::string& sweep_dir, const std::vector<PointRow>& rows, std::string* csv) {
  *csv = "event,signal,threshold,runs,events,tp,fp,fn,precision,precision_lo,precision_hi,recall,recall_lo,recall_hi,"
         "f1,median_lead,min_lead,max_lead\n";
  std::string m;
  struct Event {
    const char* key;
    const char* title;
  };
  for (const Event ev : {Event{"loss_divergence", "loss divergence"}, Event{"logit_instability", "attention-logit instability"}}) {
    std::vector<RunSignals> runs;
    int64_t events = 0;
    for (const auto& r : rows) {
      if (!r.finished()) continue;
      const bool loss = std::string(ev.key) == "loss_divergence";
      const int64_t step = loss ? (r.diverged ? r.diverged_step : -1) : (r.logit_unstable ? r.logit_unstable_step : -1);
      events += step >= 0;
      runs.push_back(read_run_signals(sweep_dir + "/" + r.name, r.name, step));
    }
    if (events == 0) continue;
    const auto table = early_warning(runs, kWarningThresholds);
    for (const auto& w : table)
      *csv += strf("%s,%s,%g,%lld,%lld,%lld,%lld,%lld,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", ev.key,
                   w.signal.c_str(), w.threshold, static_cast<long long>(w.runs), static_cast<long long>(w.events),
                   static_cast<long long>(w.tp), static_cast<long long>(w.fp), static_cast<long long>(w.fn),
                   w.precision, w.precision_ci.lo, w.precision_ci.hi, w.recall, w.recall_ci.lo, w.recall_ci.hi, w.f1,
                   w.median_lead, w.min_lead, w.max_lead);
    if (m.empty())
      m += "## What warned first\n\n"
           "For each monitored signal and threshold θ (a multiple of the median of the run's own first quarter of "
           "that signal's values): over the finished runs, how many runs with the event saw the signal cross θ "
           "strictly before it (TP), how many did not (FN), and how many runs without the event saw it cross anyway "
           "(FP). Precision and recall carry 95% percentile-bootstrap intervals over runs; the lead is the event's "
           "step minus the crossing's, over the TPs. A signal logged every N steps has a lead resolution of N steps "
           "(monitor.every for attention, output and per-matrix statistics; train.log_every for loss, grad_norm, "
           "update_ratio and update_norm). Each signal's best threshold is shown, ranked by F1 and then lead; every row is in "
           "early_warning.csv. With few events the intervals are wide: a ranking over a handful of runs is a "
           "hypothesis, not a finding.\n\n";
    m += strf("### Before %s (%lld of %zu runs)\n\n", ev.title, static_cast<long long>(events), runs.size());
    m += "| signal | θ | runs | TP | FP | FN | precision (95%) | recall (95%) | lead: median (min–max) |\n"
         "|---|---|---|---|---|---|---|---|---|\n";
    std::set<std::string> shown;
    for (const auto& w : table) {
      if (!shown.insert(w.signal).second) continue;  // the signal's best threshold only
      m += strf("| %s | %g | %lld | %lld | %lld | %lld | %s | %s | %s |\n", w.signal.c_str(), w.threshold,
                static_cast<long long>(w.runs), static_cast<long long>(w.tp), static_cast<long long>(w.fp),
                static_cast<long long>(w.fn), interval_cell(w.precision, w.precision_ci).c_str(),
                interval_cell(w.recall, w.recall_ci).c_str(),
                std::isfinite(w.median_lead) ? strf("%.0f (%.0f–%.0f)", w.median_lead, w.min_lead, w.max_lead).c_str()
                                             : "-");
    }
    m += "\n";
  }
  return m;
}

}  // namespace keel
