// The three ways keel says a run failed, and the edge each gives (issue 51):
//
//   loss_divergence    the loss blew up: non-finite, above
//                      monitor.diverge_loss_factor x the initial loss, or a
//                      final loss at or above ln(vocab) (what the LR
//                      sensitivity counts as diverged)
//   logit_instability  the layer-0 attention logit passed
//                      monitor.diverge_attn_logit (Wortsman et al. 2023);
//                      many such runs train on
//   degradation        the loss diverged, or the final validation loss is
//                      more than `margin` above the best final loss among
//                      the runs of the same group and seed at lower LRs that
//                      did not diverge: attention-logit collapse drags a
//                      model toward a bigram's loss without blowing up
//                      (Wortsman et al. 2023 read final loss vs LR; Rybakov
//                      et al. 2024 judge divergence on validation loss with
//                      no stated threshold)
//
// For every group (a sweep's point labels but LR and seed) and criterion, the
// largest LR that passed, per seed, below the smallest that failed; the
// group's edge is their geometric mean with a 95% bootstrap interval over
// seeds, as the search's edge (edge_report.h).
#pragma once

#include <string>
#include <vector>

#include "analysis/edge_report.h"
#include "analysis/sweep_report.h"

namespace keel {

// 0.1 nats: a 10.5% rise in perplexity, several times the spread of final
// losses between seeds at one LR in keel's CPU studies (docs/stability.md).
constexpr double kDefaultDegradationMargin = 0.1;

const std::vector<std::string>& edge_criterion_names();  // loss_divergence, logit_instability, degradation
bool is_edge_criterion(const std::string& name);

// Whether `row` failed under `criterion`. `peers` are the finished runs of
// its group and seed (itself among them or not); only degradation reads them.
bool run_fails(const PointRow& row, const std::string& criterion, const std::vector<const PointRow*>& peers,
               double margin = kDefaultDegradationMargin);

struct CriterionEdge {
  std::vector<int64_t> seeds;
  std::vector<EdgeBracket> brackets;  // per seed: largest LR that passed / smallest that failed
  size_t found = 0;                   // seeds with both a passing and a failing LR
  double edge = NAN;                  // geometric mean over those seeds of the largest LR that passed
  Interval interval{NAN, NAN};        // 95% percentile bootstrap over seeds; NaN below 2
};

struct CriteriaEdgeRow {
  std::string group;
  std::vector<CriterionEdge> by_criterion;  // in edge_criterion_names() order
  std::string first_failures;               // e.g. "loss 5, output_logits 3": which failed first, over its runs
};

// Every group of `rows` (finished runs with an LR), each criterion's edge.
std::vector<CriteriaEdgeRow> criteria_edges(const std::vector<PointRow>& rows,
                                            double margin = kDefaultDegradationMargin);

// The report's "Stability edge by criterion" section and, in *csv, one row per
// group, criterion and seed. Empty when no group has two LRs.
// One criterion's edge as the table prints it: "0.03 (0.03–0.03) [3/3]",
// with the seeds above or below the grid, or "above the grid" when none
// bracketed it.
std::string criterion_edge_text(const CriterionEdge& e);
std::string criteria_markdown(const std::vector<CriteriaEdgeRow>& groups, double margin, std::string* csv);

}  // namespace keel
