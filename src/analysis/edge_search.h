// The adaptive search for the stability edge (`search:` in a sweep file):
// for every group of a sweep (variant x size x other grid values x seed),
// the largest value of one key (train.lr) that trains without meeting a
// criterion, found by bisection in log space between `low` and `high` to
// within `factor`. This file is the search alone, on results given to it:
// sweep_runner.cpp runs the points it asks for, edge_report.cpp reports.
//
// The rule (bisection assumes one edge: stable below, unstable above):
//   - nothing known: run `low` and `high` (at once, when --parallel allows);
//   - `low` unstable: the edge lies below the range ("below low");
//   - `high` stable: it lies above ("above high");
//   - else the bracket is (largest stable value below the smallest unstable
//     one, that unstable value); while unstable / stable > factor, run its
//     log-midpoint, rounded to 3 significant digits so that point names stay
//     readable and a re-run asks for the same values.
// Results already known (a finished grid point at any value in the range)
// narrow the bracket before anything runs: a search reuses them.
#pragma once

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace keel {

struct EdgeSearchSpec {
  std::string key;          // the config key searched: "train.lr"
  std::string short_name;   // in point names: "lr"
  double low = 0, high = 0; // the range, 0 < low < high
  double factor = 1.25;     // resolution: stop when unstable / stable <= factor
  std::string criterion = "loss_divergence";  // | logit_instability | degradation (edge_criteria.h)
  double margin = 0.1;                        // degradation: nats above the best lower-LR run (kDefaultDegradationMargin)
};

// One result: a run at `value` met the criterion (unstable) or did not.
struct EdgeProbe {
  double value;
  bool unstable;
};

enum class EdgeState { searching, found, below_low, above_high };
const char* edge_state_name(EdgeState s);  // "searching", "found", "below low", "above high"

struct EdgeBracket {
  EdgeState state = EdgeState::searching;
  double stable = NAN;    // the largest value that trained, below `unstable`
  double unstable = NAN;  // the smallest value that met the criterion
  bool non_monotone = false;  // some value above `unstable` trained: more than one edge
  size_t probes = 0;          // results inside [low, high] it rests on
};

// What the results inside [low, high] say (others are ignored).
EdgeBracket edge_bracket(const EdgeSearchSpec& spec, const std::vector<EdgeProbe>& known);

// The values to run next: none when the search has ended, else one or two
// (both ends at the start). Values not in `known`.
std::vector<double> next_edge_values(const EdgeSearchSpec& spec, const std::vector<EdgeProbe>& known);

// The geometric midpoint of (lo, hi) rounded to the fewest significant
// digits (3 at least) that keep it strictly inside.
double edge_midpoint(double lo, double hi);

// A value as points are named and as the config is given it: "%.3g", with
// more digits when 3 would change it ("0.316", "1e-05", "0.00316").
std::string edge_value_label(double v);

// Whether a and b are one value (a relative 1e-9: labels round-trip).
bool same_edge_value(double a, double b);

// Runs a log grid from low to high with ratio `factor` needs for the same
// resolution: ceil(log(high/low) / log(factor)) + 1.
size_t edge_grid_runs(const EdgeSearchSpec& spec);
// The most runs the bisection needs for one group, with nothing known:
// the two ends plus ceil(log2(log(high/low) / log(factor))).
size_t edge_max_runs(const EdgeSearchSpec& spec);

}  // namespace keel
