// Fault injection for the crash-safety and stability tests, through one
// environment variable with one parser:
//
//   KEEL_FAULT_INJECT=<point>:<argument>
//
// Crash points (fault_point): the process kills itself with SIGKILL (no
// destructors, no atexit, no flushing: as the OOM killer or a preempted node)
// when the code reaches fault_point(<point>, <argument>):
//   save_crash_after:<file name>   CheckpointStore::save, after <file name> is
//                                  written and fsynced in the temporary dir;
//                                  "manifest.json" is the manifest, written last
//   save_crash_after:rename        after the checkpoint is renamed into place
//   prune_crash_after:unmark       CheckpointStore::prune, after the first
//                                  manifest is deleted, before its files are
// Training faults (TrainFaults), at a 1-based step N:
//   nan_loss_at_step:N             the loss is NaN (non-finite handling)
//   loss_x10_at_step:N             the loss is multiplied by 10 (a planted spike)
//                                  at data batch N: it follows the batch, not
//                                  the step (a bad batch; keel replay skips it)
//   momentum_x1000_at_step:N       after step N's update, the optimizer's first
//                                  moments (AdamW exp_avg, Muon momentum) are
//                                  multiplied by 1000: a spike planted in the
//                                  optimizer state, which step N's checkpoint
//                                  keeps
//   kill_rank_at_step:R:N          rank R kills itself before step N
//   hang_rank_at_step:R:N          rank R hangs before step N
//   sigterm_at_step:N              the process sends itself SIGTERM before step N
// Environment faults:
//   enospc_after:<file name>:N     the run directory's appends to <file name>
//                                  (metrics.jsonl, spikes.jsonl, nonfinite.jsonl)
//                                  fail with ENOSPC once N of them succeeded
//
// The variable is read at every call, so a test can set it in a forked child.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace keel {

struct FaultSpec {
  std::string point;     // "save_crash_after", "nan_loss_at_step", ...
  std::string argument;  // everything after the first ':'
};
// KEEL_FAULT_INJECT split at its first ':'; nullopt when unset or malformed.
std::optional<FaultSpec> fault_spec();

void fault_point(const std::string& point, const std::string& argument);

// enospc_after: the errno the next append to `file_name` fails with (ENOSPC),
// after `appended` appends to it, or 0.
int injected_append_errno(const std::string& file_name, int64_t appended);

struct TrainFaults {
  int64_t nan_loss_at_step = 0;  // 0 = none
  int64_t loss_x10_at_step = 0;
  int64_t kill_at_step = 0;  // this rank's
  int64_t hang_at_step = 0;  // this rank's
  int64_t sigterm_at_step = 0;
  int64_t momentum_x1000_at_step = 0;
  // keel replay --numerics: the run's own precision overflows as fp16 would
  // in block K's output (|x| x 1e5 past 65504 becomes inf); -1 = none.
  int64_t fp16_overflow_block = -1;
  bool loss_faults() const { return nan_loss_at_step || loss_x10_at_step; }
  static TrainFaults from_environment(int rank);
};

}  // namespace keel
