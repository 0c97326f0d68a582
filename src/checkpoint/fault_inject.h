// Fault injection for crash-safety tests. Setting
//
//   KEEL_FAULT_INJECT=<point>:<argument>
//
// makes the process kill itself with SIGKILL (no destructors, no atexit, no
// flushing: the same as the OOM killer or a preempted node) when the code
// reaches fault_point(<point>, <argument>). The points are:
//
//   save_crash_after:<file name>   CheckpointStore::save, after <file name> is
//                                  written and fsynced in the temporary dir;
//                                  "manifest.json" is the manifest, written last
//   save_crash_after:rename        after the checkpoint is renamed into place
//                                  (a replaced old copy not yet deleted)
//   prune_crash_after:unmark       CheckpointStore::prune, after the first
//                                  manifest is deleted, before its files are
//
// The variable is read at every point, so a test can set it in a forked child.
#pragma once

#include <string>

namespace keel {

void fault_point(const std::string& point, const std::string& argument);

}  // namespace keel
