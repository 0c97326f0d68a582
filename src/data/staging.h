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
#pragma once

#include <functional>
#include <string>

namespace keel {

class StagingDir {
 public:
  explicit StagingDir(const std::string& target);  // creates "<target>.tmp-XXXXXX"
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

void remove_stale_staging(const std::string& target);

}  // namespace keel
