// How `keel prepare` writes a data directory so that no reader ever sees a
// half-written one:
//   - util/dir_lock.h's DirLock, waiting: an exclusive flock on "<dir>.lock"
//     serializes every prepare of the same directory (e.g. all ranks calling
//     ensure_prepared at once). The kernel drops it when the process dies.
//   - StagingDir: output goes to a fresh "<dir>.tmp-XXXXXX" beside the target,
//     removed on failure; commit() renames it into place (moving an old
//     directory aside to "<dir>.old-PID" first and deleting it after).
//   - remove_stale_staging(): under the lock, deletes the ".tmp-"/".old-"
//     leftovers of runs that were killed outright.
// What may be replaced is prepare's decision (data/prepare.cpp: only a
// directory holding keel's data manifest, or an empty one); StagingDir itself
// refuses a target that is a symbolic link, since the rename would replace
// the link and not fill what it points to.
#pragma once

#include <functional>
#include <string>

namespace keel {

class StagingDir {
 public:
  // Creates "<target>.tmp-XXXXXX"; DataError if `target` is a symbolic link.
  explicit StagingDir(const std::string& target);
  ~StagingDir();                                   // removes it unless committed
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::string& path() const { return path_; }
  // fsyncs, then renames the staging directory to the target, replacing any
  // existing one. Throws DataError.
  void commit();

 private:
  std::string target_, path_;
};

// Only names StagingDir makes: "<target>.tmp-" and six characters (mkdtemp),
// "<target>.old-" and a pid.
void remove_stale_staging(const std::string& target);

}  // namespace keel
