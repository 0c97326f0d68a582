// CheckpointStore: deleting old checkpoints and leftovers of dead saves.
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include "checkpoint/checkpoint_store.h"
#include "util/fault_inject.h"
#include "util/fs.h"

namespace keel {

namespace {

// The pid in ".tmp-step_00000100-<pid>" / ".old-step_00000100-<pid>", or -1
// if `name` is not such a directory name.
long leftover_pid(const std::string& name) {
  if (name.compare(0, 10, ".tmp-step_") != 0 && name.compare(0, 10, ".old-step_") != 0) return -1;
  const size_t dash = name.rfind('-');
  if (dash < 10 || dash + 1 >= name.size() || name.size() - dash > 12) return -1;
  long pid = 0;
  for (size_t i = dash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

// A leftover is stale if its process is gone, or is us: this process does not
// save while it prunes, and after a restart our pid may be the dead one's.
bool writer_is_gone(long pid) {
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// Un-marks first (docs/papers.md#checkpoint-and-resume): once the manifest is gone and that is
// durable, a kill anywhere in the rest leaves a directory no reader trusts.
void delete_checkpoint(const std::string& dir) {
  remove_file(dir + "/" + kManifestName);
  fsync_dir(dir);
  fault_point("prune_crash_after", "unmark");
  remove_tree(dir);
}

}  // namespace

std::vector<std::string> CheckpointStore::prune(int64_t keep_last, int64_t keep_every) {
  if (keep_last < 1) throw CheckpointError("prune " + checkpoints_dir_ + ": keep_last must be >= 1");
  std::vector<std::string> removed;
  if (!path_exists(checkpoints_dir_)) return removed;

  // The one checkpoint a resume would use is never deleted, whatever the policy.
  const std::optional<std::string> newest_valid = latest_valid();
  int64_t newest_valid_step = -1;
  if (newest_valid)
    newest_valid_step = *parse_step_dir_name(base_name(*newest_valid));

  int64_t recent_kept = 0;
  for (const auto& [step, dir] : step_dirs()) {  // newest first
    if (!path_exists(dir + "/" + kManifestName)) {
      // What a prune killed after un-marking leaves. Saves never produce one
      // (they rename a finished directory), so only delete those behind a
      // valid checkpoint; a newer one is someone else's business.
      if (step < newest_valid_step) {
        remove_tree(dir);
        removed.push_back(dir);
      }
      continue;
    }
    // One that would take a keep_last slot must be whole to the last byte: a
    // corrupt one counted there would let a good older one be deleted. Those
    // past the slots are about to go, so their sizes are enough, and the
    // newest valid one latest_valid() has just read whole.
    const bool recent = recent_kept < keep_last;
    const bool read_whole = recent && step != newest_valid_step;
    try {
      verify(dir, read_whole ? VerifyLevel::checksums : VerifyLevel::sizes);
    } catch (const Error&) {  // CheckpointError or FileError
      continue;  // corrupt: never counted, never deleted here; left for inspection
    }
    if (recent) ++recent_kept;
    const bool milestone = keep_every > 0 && step % keep_every == 0;
    if (recent || milestone || step == newest_valid_step) continue;
    delete_checkpoint(dir);
    removed.push_back(dir);
  }

  // Temporary and set-aside directories of saves whose process is gone.
  std::vector<std::string> stale;
  for (const auto& name : list_directory(checkpoints_dir_)) {
    const long pid = leftover_pid(name);
    if (pid > 0 && writer_is_gone(pid)) stale.push_back(checkpoints_dir_ + "/" + name);
  }
  for (const auto& dir : stale) {
    remove_tree(dir);
    removed.push_back(dir);
  }

  if (!removed.empty()) fsync_dir(checkpoints_dir_);
  return removed;
}

std::vector<int64_t> CheckpointStore::move_steps_after(int64_t step, const std::string& to_dir) {
  std::vector<int64_t> moved;
  if (!path_exists(checkpoints_dir_)) return moved;
  for (const auto& [s, dir] : step_dirs()) {  // newest first
    if (s <= step) break;
    if (moved.empty()) ensure_directory(to_dir);
    rename_path(dir, to_dir + "/" + base_name(dir));
    moved.insert(moved.begin(), s);
  }
  if (!moved.empty()) {
    fsync_dir(to_dir);
    fsync_dir(checkpoints_dir_);
  }
  return moved;
}

}  // namespace keel
