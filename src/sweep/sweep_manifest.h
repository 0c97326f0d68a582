// SWEEP_DIR/sweep.json: what a sweep directory holds, so that re-running a
// sweep file reuses only results computed with the same settings.
//
// It records the grid (axes and their values), every point's name and
// overrides, and every point's resolved config: the full config of the
// first point under "config" and, per point, the keys where it differs
// ("differs"). Points dropped from a later version of the sweep file stay
// listed with "active": false, so that bringing them back is checked too.
// Each `keel sweep` invocation is appended to "sessions" (command, machine,
// parallelism, start and end time); `keel report` shows them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/run_files.h"
#include "sweep/sweep_spec.h"

namespace keel {

// Every key of the resolved config except those that do not change a
// point's result (run directory, threads, checkpoint and log cadence).
FlatConfig result_config(const Config& config);

// What an existing sweep.json means for a new plan.
struct Reconciliation {
  std::vector<std::string> conflicts;  // "train.max_steps: 250 -> 300 (24 points: a, b, ...)"
  std::vector<std::string> reused;     // points of the new plan already known with the same config
  std::vector<std::string> added;      // new points
  std::vector<std::string> retired;    // known points no longer in the plan (kept on disk, not reported)
};

Reconciliation reconcile(const nlohmann::json& old_manifest, const std::vector<SweepPoint>& points);

// The manifest for `points`, keeping `old_manifest`'s sessions and retired points.
nlohmann::json make_manifest(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                             const nlohmann::json& old_manifest);

// State of a point's run directory.
enum class PointState { fresh, resumable, finished };
struct PointStatus {
  PointState state = PointState::fresh;
  std::string stopped_by;   // finished: completed | diverged | nonfinite
  int64_t step = 0;         // finished: steps run; resumable: checkpoint step
  bool loss_diverged() const { return stopped_by == "diverged" || stopped_by == "nonfinite"; }
};
// Throws RunDirError for a summary.json that read_summary_json refuses.
PointStatus point_status(const std::string& run_dir);

}  // namespace keel
