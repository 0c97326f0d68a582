// `keel compare RUN_DIR... [--out DIR]`: two or three ad-hoc runs side by
// side, as `keel report` shows a sweep. One table (final and best validation
// loss and perplexity, divergence, spikes, layer-0 attention logit, tokens/s,
// and where runs have them each eval.tasks accuracy and eval.sets loss),
// the config keys in which the runs differ (they label the runs), and the
// curves drawn by scripts/plots/plot_runs.py. Works on finished runs, on runs still
// training (what metrics.jsonl holds so far) and on sweep points.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "analysis/sweep_report.h"

namespace keel {

struct CompareOptions {
  std::string out_dir;  // compare.md, compare.csv, runs.json, plots/; empty: the table on stdout only
  bool plots = true;
  std::string python;   // as ReportOptions::python
};

// key -> resolved value of a run's config.yaml (empty when it cannot be read).
using ConfigValues = std::map<std::string, std::string>;
ConfigValues resolved_values(const std::string& run_dir);

// One run's row: from summary.json when the run has finished, else from its
// metrics.jsonl so far ("running" while another process holds the run's lock;
// task results from the last record that has them).
PointRow read_run_row(const std::string& run_dir, const ConfigValues& config);

// key -> value per run, for the keys whose resolved values are not all
// equal (run.name and run.out_dir aside). A run without a readable
// config.yaml contributes "?".
std::vector<ConfigValues> differing_keys(const std::vector<ConfigValues>& runs);

// Returns 0, or 1 when plots were asked for and could not be drawn.
int compare_runs(const std::vector<std::string>& run_dirs, const CompareOptions& options);

}  // namespace keel
