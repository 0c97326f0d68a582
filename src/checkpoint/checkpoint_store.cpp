// CheckpointStore: naming and saving. Verification is in checkpoint_verify.cpp,
// pruning in checkpoint_prune.cpp.
#include "checkpoint/checkpoint_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <set>

#include "checkpoint/install_dir.h"
#include "util/fault_inject.h"
#include "util/fs.h"

namespace keel {

CheckpointStore::CheckpointStore(std::string run_dir) : run_dir_(std::move(run_dir)) {
  while (run_dir_.size() > 1 && run_dir_.back() == '/') run_dir_.pop_back();
  if (run_dir_.empty()) run_dir_ = ".";
  checkpoints_dir_ = run_dir_ + "/checkpoints";
}

std::string CheckpointStore::step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::optional<int64_t> CheckpointStore::parse_step_dir_name(const std::string& name) {
  if (name.size() < 13 || name.size() > 24 || name.compare(0, 5, "step_") != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    if (__builtin_mul_overflow(step, 10, &step) || __builtin_add_overflow(step, name[i] - '0', &step))
      return std::nullopt;
  }
  // Only the canonical spelling: "step_010" and "step_00000010" must not both count.
  if (step_dir_name(step) != name) return std::nullopt;
  return step;
}

std::string CheckpointStore::step_dir(int64_t step) const {
  return checkpoints_dir_ + "/" + step_dir_name(step);
}

std::string CheckpointStore::save(int64_t step, const std::vector<CheckpointFile>& files) {
  const std::string final_dir = step_dir(step);
  const std::string context = "saving checkpoint " + final_dir;
  if (step < 0) throw CheckpointError(context + ": step must be >= 0, got " + std::to_string(step));
  std::set<std::string> names;
  for (const auto& f : files) {
    if (std::string why = check_checkpoint_file_name(f.name); !why.empty())
      throw CheckpointError(context + ": file '" + f.name + "': " + why);
    if (!names.insert(f.name).second) throw CheckpointError(context + ": file '" + f.name + "' is given twice");
    if (!f.write) throw CheckpointError(context + ": file '" + f.name + "' has no write function");
  }

  // The pid in the name tells prune() whether the writer is still alive.
  const std::string suffix = step_dir_name(step) + "-" + std::to_string(::getpid());
  const std::string tmp = checkpoints_dir_ + "/.tmp-" + suffix;
  try {
    ensure_directory(checkpoints_dir_);
    // Left by an earlier process that had our pid (containers reuse pids).
    if (path_exists(tmp)) remove_tree(tmp);
    if (::mkdir(tmp.c_str(), 0755) != 0) {
      const int err = errno;
      throw checkpoint_error(tmp, "cannot create temporary directory: " + errno_text(err));
    }
  } catch (const std::exception& e) {
    throw CheckpointError(context + " failed: " + e.what());
  }

  std::string replaced;  // where an earlier copy of this step ended up, if any
  try {
    Manifest manifest;
    manifest.step = step;
    for (const auto& f : files) {
      const std::string path = tmp + "/" + f.name;
      try {
        f.write(path);
      } catch (const std::exception& e) {
        throw CheckpointError("writing '" + f.name + "' failed: " + e.what());
      }
      if (!path_exists(path))
        throw checkpoint_error(path, "the writer for '" + f.name + "' returned without creating the file");
      fsync_file(path);
      FileDigest d = digest_file(path);
      manifest.files.push_back({f.name, d.size, d.crc32});
      fault_point("save_crash_after", f.name);
    }
    // The manifest goes last: a directory that holds it holds every file it
    // lists (docs/papers.md#checkpoint-and-resume, like llm.c's DONE file or DCP's .metadata).
    write_file_durably(tmp + "/" + kManifestName, manifest_to_json(manifest));
    fault_point("save_crash_after", kManifestName);
    fsync_dir(tmp);  // the names inside must be durable before the directory becomes visible
    replaced = install_directory(tmp, final_dir, checkpoints_dir_ + "/.old-" + suffix);
  } catch (const std::exception& e) {
    try {
      remove_tree(tmp);
    } catch (const std::exception&) {
      // Best effort: the original error is the one to report; prune() retries.
    }
    throw CheckpointError(context + " failed: " + e.what() + " (earlier checkpoints are untouched)");
  }
  try {
    fsync_dir(checkpoints_dir_);  // makes the rename itself durable
  } catch (const std::exception& e) {
    throw CheckpointError(context + ": renamed into place, but " + e.what() +
                          " (the checkpoint may not survive a power failure)");
  }
  fault_point("save_crash_after", "rename");

  if (!replaced.empty()) {
    // The new checkpoint is in place; failing to delete the old copy is not a
    // failed save. prune() removes it later (it is a .tmp-/.old- directory).
    try {
      remove_tree(replaced);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "keel: warning: checkpoint %s saved, but the copy it replaced was not removed: %s\n",
                   final_dir.c_str(), e.what());
    }
  }
  return final_dir;
}

}  // namespace keel
