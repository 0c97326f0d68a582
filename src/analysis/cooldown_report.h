// Cooldown branches in a sweep's report (docs/papers.md#cooldown-branches):
// each branch's final validation loss and task accuracy beside its trunk's
// at the same step, and the trunk's weight EMA there, so "what would the
// loss be if we stopped here" reads off one table.
#pragma once

#include <string>
#include <vector>

#include "analysis/sweep_report.h"

namespace keel {

// "## Cooldown branches" for the rows whose summary.json records a parent
// run (train.cooldown_from), "" when none does. The trunk's metrics.jsonl is
// read from the parent path as the branch recorded it (relative to where the
// sweep ran); a trunk not found there is named in the section. `csv` gets
// one row per branch.
std::string cooldown_markdown(const std::string& sweep_dir, const std::vector<PointRow>& rows, std::string* csv);

}  // namespace keel
