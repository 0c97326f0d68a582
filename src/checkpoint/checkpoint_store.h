// Crash-safe checkpoint directories (docs/papers.md#checkpoint-and-resume).
//
//   <run_dir>/checkpoints/step_00001200/      one checkpoint
//       model.safetensors, optimizer.safetensors, state.json, ...  (the caller's files)
//       manifest.json                          written last: name, size, CRC-32 of each
//   <run_dir>/checkpoints/.tmp-step_00001400-<pid>/   a save in progress (or a dead one)
//
// Saving writes everything into the .tmp- directory, fsyncs each file, writes
// and fsyncs the manifest, fsyncs the directory, renames it into place and
// fsyncs the parent. A kill at any point leaves either the complete new
// checkpoint or no trace of it except a .tmp- directory that readers ignore
// and prune() removes. Only a directory whose manifest is present and whose
// files match it (size and CRC-32) counts as a checkpoint.
//
// One process writes (saves, prunes) a run directory at a time; any number
// may read it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/manifest.h"
#include "util/error.h"

namespace keel {

// One file of a checkpoint: `write` creates the file at the path it is given
// (e.g. by calling write_safetensors). It may throw; the save then fails
// cleanly. The store fsyncs the file afterwards, so the writer need not.
struct CheckpointFile {
  std::string name;  // plain file name, e.g. "model.safetensors"; not "manifest.json"
  std::function<void(const std::string& path)> write;
};

enum class VerifyLevel {
  sizes,      // manifest valid, every listed file present with the listed size (cheap: stat only)
  checksums,  // and every file's CRC-32 matches (reads every byte)
};

class CheckpointStore {
 public:
  explicit CheckpointStore(std::string run_dir);

  const std::string& checkpoints_dir() const { return checkpoints_dir_; }
  static std::string step_dir_name(int64_t step);  // "step_00001200"
  // The step of a canonical step directory name, nullopt for anything else.
  static std::optional<int64_t> parse_step_dir_name(const std::string& name);
  std::string step_dir(int64_t step) const;         // <checkpoints_dir>/step_00001200

  // Writes a checkpoint for `step` and returns its directory. Saving a step
  // that already exists replaces it atomically (renameat2 exchange). Throws
  // CheckpointError naming the path and the system's reason (disk full,
  // read-only, not a directory, a writer that threw); on failure the
  // temporary directory is removed and earlier checkpoints are untouched.
  std::string save(int64_t step, const std::vector<CheckpointFile>& files);

  // Newest checkpoint that passes verify(checksums), or nullopt. Newer
  // directories that fail are skipped and, if `rejected` is given, reported
  // there one message each ("<path>: <why>"). Reads every byte of the
  // checkpoint it returns (and of the rejected ones). Throws CheckpointError
  // only if the checkpoints directory exists but cannot be listed.
  std::optional<std::string> latest_valid(std::vector<std::string>* rejected = nullptr) const;

  // Every checkpoint passing verify(level), oldest first, as (step, dir).
  std::vector<std::pair<int64_t, std::string>> list_valid(VerifyLevel level = VerifyLevel::checksums,
                                                           std::vector<std::string>* rejected = nullptr) const;

  // Throws CheckpointError naming the offending file if the directory is not
  // a valid checkpoint: manifest missing or malformed, its step differing
  // from the directory name, a listed file missing, of another size, or (at
  // VerifyLevel::checksums) with another CRC-32. Files the manifest does not
  // list are ignored. Returns the manifest.
  static Manifest verify(const std::string& checkpoint_dir, VerifyLevel level = VerifyLevel::checksums);

  // Deletes old checkpoints, keeping the newest `keep_last` (>= 1) complete
  // ones, every one whose step is a multiple of `keep_every` (0: none), and
  // always the newest one that passes the checksum check. A checkpoint is
  // deleted manifest first (then fsync), so a kill mid-delete never leaves a
  // half-deleted directory that looks valid. Also removes: step directories
  // without a manifest that are older than the newest valid checkpoint (what
  // an interrupted prune leaves), and .tmp-/.old- directories of processes
  // that no longer exist (or of this process, which is not saving while it
  // prunes). Directories with a manifest that fails verification are kept
  // for inspection. Returns the removed directories.
  std::vector<std::string> prune(int64_t keep_last, int64_t keep_every);

  // Moves every step directory newer than `step` (valid or not) into
  // `to_dir` (created), by rename: a resume from an older checkpoint starts
  // a new branch, and the abandoned checkpoints are kept there, out of reach
  // of --resume auto and of prune. Returns the steps moved, oldest first.
  std::vector<int64_t> move_steps_after(int64_t step, const std::string& to_dir);

 private:
  // (step, dir) of every step_<N> directory, newest first.
  std::vector<std::pair<int64_t, std::string>> step_dirs() const;

  std::string run_dir_;
  std::string checkpoints_dir_;
};

}  // namespace keel
