// keel report's "Stability edge" section, for a sweep with `search:`
// (edge_search.h): per group and seed the bracket its bisection reached, and
// per group the edge over seeds with a 95% bootstrap interval, and the runs
// the search took against a log grid of the same resolution.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/edge_search.h"
#include "analysis/study_stats.h"
#include "analysis/sweep_report.h"

namespace keel {

// One group over its seeds.
struct EdgeGroupRow {
  std::string group;                 // the grid's labels but the seed ("rms", "all")
  std::vector<int64_t> seeds;
  std::vector<EdgeBracket> brackets;  // one per seed
  size_t runs = 0;                    // finished runs inside the range, all seeds
  size_t found = 0;                   // seeds whose bracket reached the factor
  double edge = NAN;                  // geometric mean over those seeds of the largest value that trained
  Interval interval{NAN, NAN};        // 95% percentile bootstrap of `edge` (resampling the seeds); NaN below 2
};

// The geometric mean of positive values, and its 95% percentile bootstrap
// (resampling the values; NaN below two), seeded so a report regenerates alike.
double geometric_mean(const std::vector<double>& v);
Interval bootstrap_geometric_mean(const std::vector<double>& v, size_t replicates = 2000, uint64_t seed = 20231);


// The search spec sweep.json records (manifest["search"]); false when there is none.
bool manifest_search(const nlohmann::json& manifest, EdgeSearchSpec* spec);

// The groups of a search sweep from its rows (finished runs only).
std::vector<EdgeGroupRow> edge_groups(const nlohmann::json& manifest, const EdgeSearchSpec& spec,
                                      const std::vector<PointRow>& rows);

// The markdown section and, in *csv, one row per group and seed.
std::string edge_markdown(const EdgeSearchSpec& spec, const std::vector<EdgeGroupRow>& groups, std::string* csv);

}  // namespace keel
