// One writer per directory. A run directory (keel train) or a sweep directory
// (keel sweep) is locked with flock(2) on its lock file for as long as the
// process lives; the kernel releases the lock when the holder exits or dies,
// so a killed run never leaves a stale lock behind and no PID guessing is
// needed. A second writer (a requeued job, a sweep started twice) gets a
// RunDirError, exit 2, naming the holder's host, pid and start time.
#pragma once

#include <functional>
#include <string>

namespace keel {

inline constexpr const char* kLockFileName = "keel.lock";

// The other policy, for `keel prepare`: wait for the holder (every rank may
// prepare the same data directory at once; one does the work, the others then
// find it done). The lock file sits beside the directory, which a prepare
// replaces by rename. `on_wait` is called once if the lock is taken.
struct WaitForLock {
  std::function<void(const std::string&)> on_wait;
};

class DirLock {
 public:
  // Locks `dir` (created if missing) or throws RunDirError. `what` names the
  // directory in messages: "run directory", "sweep directory".
  DirLock(const std::string& dir, const std::string& what);
  // Locks the file `lock_path`, waiting while another process holds it.
  DirLock(const std::string& lock_path, const WaitForLock& wait);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  void write_holder_note(const std::string& path);
  std::string dir_;
  int fd_ = -1;
};

// Whether another process holds `dir`'s lock now (for a sweep deciding
// whether a point directory may be emptied).
bool dir_is_locked(const std::string& dir);

}  // namespace keel
