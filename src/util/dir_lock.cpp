#include "util/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"
#include "util/host.h"
#include "util/text.h"

namespace keel {

namespace {

// The holder's note, read from the lock file: bounded, printable bytes only.
std::string holder_note(int fd) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string note;
  for (ssize_t i = 0; i < n; ++i)
    if (buf[i] >= 0x20 && buf[i] < 0x7f) note += buf[i];
  return note.empty() ? "an unknown process" : note;
}

}  // namespace

// Says who holds the lock, for the next one that asks. On failure the lock
// is let go (a throwing constructor runs no destructor).
void DirLock::write_holder_note(const std::string& path) {
  const std::string note = "keel pid " + std::to_string(::getpid()) + " on " + host_name() + " since " + utc_now();
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, note.data(), note.size(), 0) != static_cast<ssize_t>(note.size())) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw FileError(path + ": cannot write the lock holder's note: " + errno_text(err), exit_code_for_errno(err));
  }
}

DirLock::DirLock(const std::string& lock_path, const WaitForLock& wait) : dir_(lock_path) {
  fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw FileError(lock_path + ": cannot create lock file: " + errno_text(err), exit_code_for_errno(err));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (wait.on_wait) wait.on_wait("waiting for " + holder_note(fd_) + " (" + lock_path + ")");
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      throw FileError(lock_path + ": flock failed: " + errno_text(err), exit_code_for_errno(err));
    }
  }
  write_holder_note(lock_path);
}

DirLock::DirLock(const std::string& dir, const std::string& what) : dir_(dir) {
  ensure_directory(dir);
  const std::string path = dir + "/" + kLockFileName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RunDirError(what + " " + dir + ": cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string note = holder_note(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw RunDirError(what + " " + dir + " is in use by " + note +
                        "; wait for it to finish or stop it (the lock goes with the process), or use another "
                        "directory");
    throw RunDirError(what + " " + dir + ": cannot lock " + path + ": " + std::strerror(err));
  }
  write_holder_note(path);
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

bool dir_is_locked(const std::string& dir) {
  const std::string path = dir + "/" + kLockFileName;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

}  // namespace keel
