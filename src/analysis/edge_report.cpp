#include "analysis/edge_report.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>

#include "analysis/edge_criteria.h"
#include "util/json.h"
#include "util/log.h"
#include "util/text.h"

namespace keel {

bool manifest_search(const nlohmann::json& manifest, EdgeSearchSpec* spec) {
  if (!manifest.is_object() || !manifest.contains("search") || !manifest["search"].is_object()) return false;
  const auto& s = manifest["search"];
  auto number = [&](const char* k) { return s.contains(k) && s[k].is_number() ? s[k].get<double>() : NAN; };
  auto text = [&](const char* k) { return s.contains(k) && s[k].is_string() ? s[k].get<std::string>() : ""; };
  spec->key = text("key");
  spec->short_name = text("short");
  spec->low = number("low");
  spec->high = number("high");
  spec->factor = number("factor");
  spec->criterion = text("criterion");
  if (std::isfinite(number("margin"))) spec->margin = number("margin");
  // A hand-edited manifest with no usable search is no search.
  return !spec->key.empty() && spec->low > 0 && spec->high > spec->low && spec->factor > 1 &&
         is_edge_criterion(spec->criterion) && spec->margin > 0;
}

double geometric_mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

Interval bootstrap_geometric_mean(const std::vector<double>& v, size_t replicates, uint64_t seed) {
  if (v.size() < 2) return {NAN, NAN};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> means;
  std::vector<double> sample(v.size());
  for (size_t r = 0; r < replicates; ++r) {
    for (auto& x : sample) x = v[pick(rng)];
    means.push_back(geometric_mean(sample));
  }
  std::sort(means.begin(), means.end());
  return {percentile_of_sorted(means, 0.025), percentile_of_sorted(means, 0.975)};
}

std::vector<EdgeGroupRow> edge_groups(const nlohmann::json& manifest, const EdgeSearchSpec& spec,
                                      const std::vector<PointRow>& rows) {
  std::map<std::string, const PointRow*> by_name;
  for (const auto& r : rows) by_name[r.name] = &r;
  // group -> seed -> results, in first-seen order
  std::vector<std::string> order;
  std::map<std::string, std::map<int64_t, std::vector<std::pair<double, const PointRow*>>>> runs;
  for (const auto& p : manifest.at("points")) {
    if (!p.is_object() || !p.value("active", true) || !p.contains("labels") || !p["labels"].is_object()) continue;
    const auto& labels = p["labels"];
    if (!labels.contains(spec.key) || !labels[spec.key].is_string()) continue;
    auto row = by_name.find(p.value("name", std::string()));
    if (row == by_name.end() || !row->second->finished()) continue;
    char* end = nullptr;
    const std::string label = labels[spec.key].get<std::string>();
    const double value = std::strtod(label.c_str(), &end);
    if (!end || *end != '\0' || !(value > 0)) continue;
    std::string group;
    for (const auto& axis : manifest.at("axes")) {
      const std::string key = axis.value("key", std::string());
      if (key == "run.seed" || !labels.contains(key) || !labels[key].is_string()) continue;
      const std::string short_name = axis.value("short", std::string());
      group += (group.empty() ? "" : "_") + (short_name.empty() ? "" : short_name + "=") + labels[key].get<std::string>();
    }
    if (group.empty()) group = "all";
    const PointRow& r = *row->second;
    if (!runs.count(group)) order.push_back(group);
    runs[group][r.seed].push_back({value, &r});
  }
  // Judged against the seed's other runs (degradation compares them), at the search key's values.
  std::map<std::string, std::map<int64_t, std::vector<EdgeProbe>>> probes;
  for (const auto& [group, seeds] : runs)
    for (const auto& [seed, list] : seeds) {
      std::vector<PointRow> at_value;
      for (const auto& [value, r] : list) {
        at_value.push_back(*r);
        at_value.back().lr = value;
      }
      std::vector<const PointRow*> peers;
      for (const auto& r : at_value) peers.push_back(&r);
      for (const auto& r : at_value) probes[group][seed].push_back({r.lr, run_fails(r, spec.criterion, peers, spec.margin)});
    }
  std::vector<EdgeGroupRow> out;
  for (const auto& g : order) {
    EdgeGroupRow row;
    row.group = g;
    std::vector<double> edges;
    for (const auto& [seed, known] : probes[g]) {
      row.seeds.push_back(seed);
      row.brackets.push_back(edge_bracket(spec, known));
      row.runs += row.brackets.back().probes;
      if (row.brackets.back().state == EdgeState::found) edges.push_back(row.brackets.back().stable);
    }
    row.found = edges.size();
    if (!edges.empty()) row.edge = geometric_mean(edges);
    row.interval = bootstrap_geometric_mean(edges);
    out.push_back(row);
  }
  return out;
}

std::string edge_markdown(const EdgeSearchSpec& spec, const std::vector<EdgeGroupRow>& groups, std::string* csv) {
  *csv = "group,seed,state,stable,unstable,runs,non_monotone\n";
  if (groups.empty()) return "";
  const std::string key = "`" + spec.key + "`";
  const std::string what =
      spec.criterion == "logit_instability" ? "its layer-0 attention logit passed `monitor.diverge_attn_logit`"
      : spec.criterion == "degradation"
          ? "its loss diverged or its final validation loss lay more than " + strf("%g", spec.margin) +
                " nats above the best run of its seed at a lower value"
          : "its loss diverged (non-finite, exploding, or a final loss at or above ln(vocab))";
  std::string m = "## Stability edge\n\n";
  m += "The largest " + key + " that trains, found by bisection in log space between " + edge_value_label(spec.low) +
       " and " + edge_value_label(spec.high) + " to a factor of " + edge_value_label(spec.factor) +
       " (docs/sweeps.md#searching-for-the-stability-edge). A run counts as unstable when " + what +
       ". Per seed, the edge lies between the largest value that trained and the smallest that did not; the edge "
       "of a group is the geometric mean over seeds of the largest value that trained, with a 95% percentile "
       "bootstrap interval over seeds (2000 replicates) when at least two seeds found theirs. Bisection assumes one "
       "edge: a value above the bracket that trained again is flagged non-monotone.\n\n";
  m += "| group | seeds found | edge (geometric mean) | 95% interval | per seed: trains at / fails at | runs | a grid at "
       "this resolution |\n|---|---|---|---|---|---|---|\n";
  const size_t grid = edge_grid_runs(spec);
  std::string notes;
  for (const auto& g : groups) {
    std::string per_seed;
    for (size_t i = 0; i < g.seeds.size(); ++i) {
      const EdgeBracket& b = g.brackets[i];
      std::string text;
      switch (b.state) {
        case EdgeState::found: text = edge_value_label(b.stable) + " / " + edge_value_label(b.unstable); break;
        case EdgeState::below_low: text = "below " + edge_value_label(spec.low); break;
        case EdgeState::above_high: text = "above " + edge_value_label(spec.high); break;
        case EdgeState::searching:
          text = "unfinished (" + (std::isfinite(b.stable) ? edge_value_label(b.stable) : std::string("?")) + " / " +
                 (std::isfinite(b.unstable) ? edge_value_label(b.unstable) : std::string("?")) + ")";
          break;
      }
      if (b.non_monotone) text += ", non-monotone";
      per_seed += (per_seed.empty() ? "" : "; ") + (g.seeds.size() > 1 ? "seed " + std::to_string(g.seeds[i]) + ": " : "") + text;
      *csv += g.group + "," + std::to_string(g.seeds[i]) + "," + edge_state_name(b.state) + "," +
              (std::isfinite(b.stable) ? edge_value_label(b.stable) : "") + "," +
              (std::isfinite(b.unstable) ? edge_value_label(b.unstable) : "") + "," + std::to_string(b.probes) + "," +
              (b.non_monotone ? "true" : "false") + "\n";
      if (b.non_monotone) notes += "- " + g.group + (g.seeds.size() > 1 ? " seed " + std::to_string(g.seeds[i]) : "") +
                                   ": a value above the bracket trained again; the edge is not a single threshold "
                                   "there, and bisection found one of its edges.\n";
    }
    m += "| " + g.group + " | " + std::to_string(g.found) + "/" + std::to_string(g.seeds.size()) + " | " +
         md_cell(g.edge, "%.3g") + " | " +
         (std::isfinite(g.interval.lo) ? md_cell(g.interval.lo, "%.3g") + "–" + md_cell(g.interval.hi, "%.3g")
                                       : std::string("-")) +
         " | " + per_seed + " | " + std::to_string(g.runs) + " | " + std::to_string(grid * g.seeds.size()) + " |\n";
  }
  m += "\n";
  if (!notes.empty()) m += notes + "\n";
  m += "The grid column counts the points of a log grid from " + edge_value_label(spec.low) + " to " +
       edge_value_label(spec.high) + " with ratio " + edge_value_label(spec.factor) + " (" + std::to_string(grid) +
       " per seed), which brackets the edge as tightly. With one seed there is no interval: the edge may be that "
       "seed's.\n\n";
  return m;
}

}  // namespace keel
