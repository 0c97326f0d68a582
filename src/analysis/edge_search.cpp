#include "analysis/edge_search.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace keel {

const char* edge_state_name(EdgeState s) {
  switch (s) {
    case EdgeState::searching: return "searching";
    case EdgeState::found: return "found";
    case EdgeState::below_low: return "below low";
    case EdgeState::above_high: return "above high";
  }
  return "?";
}

bool same_edge_value(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

namespace {

bool in_range(const EdgeSearchSpec& s, double v) {
  return (v > s.low || same_edge_value(v, s.low)) && (v < s.high || same_edge_value(v, s.high));
}

bool known_value(const std::vector<EdgeProbe>& known, double v) {
  return std::any_of(known.begin(), known.end(), [&](const EdgeProbe& p) { return same_edge_value(p.value, v); });
}

std::string format_digits(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, v);
  return buf;
}

}  // namespace

EdgeBracket edge_bracket(const EdgeSearchSpec& spec, const std::vector<EdgeProbe>& known) {
  EdgeBracket b;
  bool low_unstable = false, high_stable = false;
  for (const auto& p : known) {
    if (!in_range(spec, p.value)) continue;
    ++b.probes;
    if (p.unstable && !(b.unstable <= p.value)) b.unstable = p.value;  // NaN compares false: the first sets it
    if (p.unstable && same_edge_value(p.value, spec.low)) low_unstable = true;
    if (!p.unstable && same_edge_value(p.value, spec.high)) high_stable = true;
  }
  for (const auto& p : known) {
    if (!in_range(spec, p.value) || p.unstable) continue;
    if (std::isfinite(b.unstable) && p.value > b.unstable) {
      b.non_monotone = true;
      continue;
    }
    if (!(b.stable >= p.value)) b.stable = p.value;
  }
  if (low_unstable) b.state = EdgeState::below_low;
  else if (high_stable && !std::isfinite(b.unstable)) b.state = EdgeState::above_high;
  else if (std::isfinite(b.stable) && std::isfinite(b.unstable) && b.unstable <= b.stable * spec.factor * (1 + 1e-9))
    b.state = EdgeState::found;
  return b;
}

std::vector<double> next_edge_values(const EdgeSearchSpec& spec, const std::vector<EdgeProbe>& known) {
  const EdgeBracket b = edge_bracket(spec, known);
  if (b.state != EdgeState::searching) return {};
  std::vector<double> next;
  if (!std::isfinite(b.stable) && !known_value(known, spec.low)) next.push_back(spec.low);
  if (!std::isfinite(b.unstable) && !known_value(known, spec.high)) next.push_back(spec.high);
  if (!next.empty()) return next;
  // Both ends of a bracket are known: bisect it. (A range end not run but
  // bracketed by reused results inside the range needs no run.)
  const double lo = std::isfinite(b.stable) ? b.stable : spec.low;
  const double hi = std::isfinite(b.unstable) ? b.unstable : spec.high;
  const double mid = edge_midpoint(lo, hi);
  if (known_value(known, mid) || !(mid > lo && mid < hi)) return {};  // cannot split further
  return {mid};
}

double edge_midpoint(double lo, double hi) {
  const double exact = std::sqrt(lo * hi);
  for (int digits = 3; digits <= 17; ++digits) {
    const double v = std::strtod(format_digits(exact, digits).c_str(), nullptr);
    if (v > lo && v < hi && !same_edge_value(v, lo) && !same_edge_value(v, hi)) return v;
  }
  return exact;
}

std::string edge_value_label(double v) {
  for (int digits = 3; digits < 17; ++digits) {
    const std::string s = format_digits(v, digits);
    if (same_edge_value(std::strtod(s.c_str(), nullptr), v)) return s;
  }
  return format_digits(v, 17);
}

size_t edge_grid_runs(const EdgeSearchSpec& spec) {
  return static_cast<size_t>(std::ceil(std::log(spec.high / spec.low) / std::log(spec.factor) - 1e-9)) + 1;
}

size_t edge_max_runs(const EdgeSearchSpec& spec) {
  const double intervals = std::log(spec.high / spec.low) / std::log(spec.factor);
  return 2 + (intervals <= 1 ? 0 : static_cast<size_t>(std::ceil(std::log2(intervals) - 1e-9)));
}

}  // namespace keel
