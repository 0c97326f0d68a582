#include "analysis/edge_criteria.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "util/log.h"
#include "util/text.h"

namespace keel {

const std::vector<std::string>& edge_criterion_names() {
  static const std::vector<std::string> names = {"loss_divergence", "logit_instability", "degradation"};
  return names;
}

bool is_edge_criterion(const std::string& name) {
  const auto& n = edge_criterion_names();
  return std::find(n.begin(), n.end(), name) != n.end();
}

bool run_fails(const PointRow& row, const std::string& criterion, const std::vector<const PointRow*>& peers,
               double margin) {
  const bool blown_up = row.loss_diverged(row.uniform_loss());
  if (criterion == "loss_divergence") return blown_up;
  if (criterion == "logit_instability") return row.logit_unstable;
  if (blown_up) return true;
  // degradation: against the best run below this LR that did not blow up.
  double best = NAN;
  for (const PointRow* p : peers)
    if (p->lr < row.lr && p->finished() && !p->loss_diverged(p->uniform_loss()) && !(best <= p->result_loss()))
      best = p->result_loss();
  return std::isfinite(best) && row.result_loss() > best + margin;
}

std::vector<CriteriaEdgeRow> criteria_edges(const std::vector<PointRow>& rows, double margin) {
  // group -> seed -> its finished runs with an LR, groups in first-seen order
  std::vector<std::string> order;
  std::map<std::string, std::map<int64_t, std::vector<const PointRow*>>> runs;
  for (const auto& r : rows) {
    if (!r.finished() || !(r.lr > 0)) continue;
    if (!runs.count(r.variant)) order.push_back(r.variant);
    runs[r.variant][r.seed].push_back(&r);
  }
  std::vector<CriteriaEdgeRow> out;
  for (const auto& g : order) {
    CriteriaEdgeRow row;
    row.group = g;
    std::map<std::string, int> first;
    for (const auto& [seed, peers] : runs[g])
      for (const PointRow* p : peers)
        if (!p->first_failure.empty()) ++first[p->first_failure];
    for (const auto& [kind, n] : first) row.first_failures += (row.first_failures.empty() ? "" : ", ") + kind + " " + std::to_string(n);
    for (const auto& criterion : edge_criterion_names()) {
      CriterionEdge e;
      std::vector<double> edges;
      for (const auto& [seed, peers] : runs[g]) {
        EdgeSearchSpec spec;  // the seed's own LR range; any bracket is as fine as the grid
        spec.low = INFINITY;
        spec.high = 0;
        std::vector<EdgeProbe> probes;
        for (const PointRow* p : peers) {
          spec.low = std::min(spec.low, p->lr);
          spec.high = std::max(spec.high, p->lr);
          probes.push_back({p->lr, run_fails(*p, criterion, peers, margin)});
        }
        spec.factor = spec.high / spec.low + 1;
        e.seeds.push_back(seed);
        e.brackets.push_back(edge_bracket(spec, probes));
        if (e.brackets.back().state == EdgeState::found) edges.push_back(e.brackets.back().stable);
      }
      e.found = edges.size();
      if (!edges.empty()) e.edge = geometric_mean(edges);
      e.interval = bootstrap_geometric_mean(edges);
      row.by_criterion.push_back(e);
    }
    out.push_back(row);
  }
  return out;
}

std::string criterion_edge_text(const CriterionEdge& e) {
  if (e.found == 0) {
    // No seed bracketed it: say which side of the grid it lies on.
    bool all_pass = true, all_fail = true;
    for (const auto& b : e.brackets) {
      all_pass = all_pass && b.state == EdgeState::above_high;
      all_fail = all_fail && b.state == EdgeState::below_low;
    }
    if (all_pass && !e.brackets.empty()) return "above the grid";
    if (all_fail && !e.brackets.empty()) return "below the grid";
    return "-";
  }
  std::string s = md_cell(e.edge, "%.3g");
  if (std::isfinite(e.interval.lo)) s += " (" + md_cell(e.interval.lo, "%.3g") + "–" + md_cell(e.interval.hi, "%.3g") + ")";
  s += " [" + std::to_string(e.found) + "/" + std::to_string(e.seeds.size()) + "]";
  // Seeds the grid did not bracket pull the true edge up (or down): the
  // mean above is over the bracketed seeds only, so say how many lie outside.
  size_t above = 0, below = 0;
  for (const auto& b : e.brackets) {
    above += b.state == EdgeState::above_high;
    below += b.state == EdgeState::below_low;
  }
  if (above) s += "; " + std::to_string(above) + " above the grid";
  if (below) s += "; " + std::to_string(below) + " below the grid";
  return s;
}

std::string criteria_markdown(const std::vector<CriteriaEdgeRow>& groups, double margin, std::string* csv) {
  *csv = "group,criterion,seed,state,passed,failed\n";
  bool any = false;
  for (const auto& g : groups)
    for (const auto& e : g.by_criterion)
      for (const auto& b : e.brackets) any = any || b.probes >= 2;
  if (!any) return "";
  const auto& names = edge_criterion_names();
  std::string m = "## Stability edge by criterion\n\n";
  m += "The largest LR that passed, per criterion (docs/sweeps.md#three-criteria): **loss divergence** (non-finite, "
       "exploding, or a final loss at or above ln(vocab)), **logit instability** (the layer-0 attention logit passed "
       "`monitor.diverge_attn_logit`), **degradation** (loss divergence, or a final validation loss more than " +
       strf("%g", margin) +
       " nats above the best run of the same group and seed at a lower LR). Per seed the edge lies between the "
       "largest LR that passed and the smallest that failed; a group's edge is the geometric mean over its seeds "
       "with a 95% percentile bootstrap interval (2000 replicates) when two or more seeds bracketed it; [k/n]: seeds "
       "that bracketed it, and how many passed every LR (above the grid) or none (below). On a grid the edge is only as fine as the grid. First failure: over the group's runs, "
       "which signal failed first (the run's `first_failure`).\n\n";
  m += "| group | loss divergence | logit instability | degradation | first failure (runs) |\n|---|---|---|---|---|\n";
  for (const auto& g : groups) {
    m += "| " + g.group;
    for (size_t c = 0; c < names.size(); ++c) {
      const CriterionEdge& e = g.by_criterion[c];
      m += " | " + criterion_edge_text(e);
      for (size_t i = 0; i < e.seeds.size(); ++i) {
        const EdgeBracket& b = e.brackets[i];
        *csv += csv_field(g.group) + "," + names[c] + "," + std::to_string(e.seeds[i]) + "," + edge_state_name(b.state) +
                "," + (std::isfinite(b.stable) ? edge_value_label(b.stable) : "") + "," +
                (std::isfinite(b.unstable) ? edge_value_label(b.unstable) : "") + "\n";
      }
    }
    m += " | " + (g.first_failures.empty() ? std::string("none failed") : g.first_failures) + " |\n";
  }
  m += "\n";
  return m;
}

}  // namespace keel
