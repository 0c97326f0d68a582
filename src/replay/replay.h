// `keel replay RUN_DIR --step N [--steps K]`: why did the spike at step N
// happen? PaLM (Chowdhery et al. 2022, §5.1) found that replaying a spike's
// batches from an earlier checkpoint often did not reproduce it. keel forks
// the run from its newest checkpoint before N into branches, each trained
// to N + K by a child `keel train --resume CKPT --fork-change/--fork-skip`
// (train/trainer.h), and asks of each whether the spike comes back:
//
//   identical  the same batches, settings and state: does it reproduce at all?
//   skip       the batches from the checkpoint through N skipped: was it the data?
//   reorder    another data order (run.seed + 1) from the checkpoint on
//   lr_half    train.lr and train.min_lr halved from the checkpoint on
//   precision  fp32 for a bf16 run; fp64 (CPU) for an fp32 run
//
// A branch reproduces the spike when its own spike detector, restored from
// the checkpoint with the run's settings, flags the same signal at a step
// after the checkpoint (through N + K). Branches only observe:
// monitor.on_spike is none in every one. Everything goes to
// RUN_DIR/branches/replay-<N>/ (one run directory per branch, replay.md,
// replay.json, plots/); the run itself is never written to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"

namespace keel {

struct ReplayOptions {
  std::string run_dir;
  int64_t step = 0;           // N: the spike's step
  int64_t steps = 20;         // K: branches run to N + K
  int64_t from = -1;          // the checkpoint to fork from; -1 = the newest before N
  std::vector<std::string> branches;  // empty: all that apply
  int64_t skip_batches = 0;   // skip branch: batches skipped after the checkpoint; 0 = through step N
  int threads = 0;            // per branch; 0 = all cores (branches run one after another)
  bool plots = true;
  std::string python;
};

// One branch: its name, what it changes, and the child's extra arguments.
struct ReplayBranch {
  std::string name;
  std::string what;
  std::vector<std::string> sets;          // --set key=value
  std::vector<std::string> fork_changes;  // --fork-change key
  std::vector<std::string> fork_skips;    // --fork-skip AFTER:COUNT
  std::string unavailable;                // why this branch cannot run here ("" when it can)
};

const std::vector<std::string>& replay_branch_names();

// What the run computed on, as its compute.json recorded it when it started
// (train.device and train.precision "auto" resolved: Trainer writes it).
// known is false for a run without the file (made by an older keel).
struct RunCompute {
  bool known = false;
  bool cuda = false;
  std::string precision;  // "bf16", "fp32" or "fp64"
};
RunCompute read_run_compute(const std::string& run_dir);

// The branches for a run with config `run` that computed on `compute`, forked
// at checkpoint step `from` to study the spike at `step`. Throws ConfigError
// for an unknown name.
std::vector<ReplayBranch> replay_branches(const Config& run, const RunCompute& compute, int64_t from, int64_t step,
                                          int64_t skip_batches, const std::vector<std::string>& wanted);

// The spikes of a run directory's spikes.jsonl at steps in [first, last]
// (checked by check_run_logs first), as {"step", "signal", "value", "z"}.
std::vector<nlohmann::json> spikes_between(const std::string& run_dir, int64_t first, int64_t last);

// Whether a branch reproduced the spike: a spike of one of `signals` at a
// step in (from, last].
bool reproduces(const std::vector<nlohmann::json>& branch_spikes, const std::vector<std::string>& signals);

// Where a replay starts: the run directory (trailing slashes gone), its
// config, and its newest valid checkpoint before `step` (or the one of step
// `from_step` when >= 0). Throws RunDirError naming what is missing.
struct ReplayStart {
  std::string run_dir;
  Config cfg;
  int64_t from = -1;
  std::string dir;
};
ReplayStart replay_start(const std::string& run_dir, int64_t step, int64_t from_step);

// Returns the exit code: 0 every branch ran, 1 some branch failed, 2 bad
// input (no checkpoint before N, no run there), 4 plots not drawn.
int run_replay(const ReplayOptions& options);

}  // namespace keel
