#include "data/staging.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"

namespace keel {

DirLock::DirLock(const std::string& dir, const std::function<void(const std::string&)>& on_wait) {
  const std::string path = dir + ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw data_error(path, std::string("cannot create lock file: ") + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (on_wait) on_wait("waiting for another keel preparing " + dir + " (" + path + ")");
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    std::string why = std::strerror(errno);
    ::close(fd_);
    throw data_error(path, "flock failed: " + why);
  }
}

DirLock::~DirLock() {
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

StagingDir::StagingDir(const std::string& target) : target_(target) {
  std::string tmpl = target + ".tmp-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw data_error(tmpl, std::string("cannot create: ") + std::strerror(errno));
  path_ = tmpl;
}

StagingDir::~StagingDir() {
  if (!path_.empty()) remove_tree_best_effort(path_);
}

void StagingDir::commit() {
  fsync_dir_best_effort(path_);  // file contents were fsynced as each was closed
  std::string old;
  if (path_kind(target_) != PathKind::missing) {
    old = target_ + ".old-" + std::to_string(::getpid());
    if (std::rename(target_.c_str(), old.c_str()) != 0)
      throw data_error(target_, std::string("cannot move the old directory aside: ") + std::strerror(errno));
  }
  if (std::rename(path_.c_str(), target_.c_str()) != 0)
    throw data_error(target_, "cannot rename " + path_ + " into place: " + std::strerror(errno));
  path_.clear();
  fsync_dir_best_effort(dir_name(target_));
  if (!old.empty()) remove_tree_best_effort(old);
}

void remove_stale_staging(const std::string& target) {
  const std::string parent = dir_name(target), base = base_name(target);
  for (const auto& name : list_directory(parent))
    if (name.rfind(base + ".tmp-", 0) == 0 || name.rfind(base + ".old-", 0) == 0)
      remove_tree_best_effort(parent + "/" + name);
}

}  // namespace keel
