#include "data/staging.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "data/data_error.h"
#include "data/fs_util.h"

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
  if (!path_.empty()) data_fs::remove_tree(path_);
}

void StagingDir::commit() {
  data_fs::fsync_dir(path_);  // file contents were fsynced as each was closed
  std::string old;
  if (data_fs::kind_of(target_) != data_fs::Kind::missing) {
    old = target_ + ".old-" + std::to_string(::getpid());
    if (std::rename(target_.c_str(), old.c_str()) != 0)
      throw data_error(target_, std::string("cannot move the old directory aside: ") + std::strerror(errno));
  }
  if (std::rename(path_.c_str(), target_.c_str()) != 0)
    throw data_error(target_, "cannot rename " + path_ + " into place: " + std::strerror(errno));
  path_.clear();
  data_fs::fsync_dir(data_fs::parent_of(target_));
  if (!old.empty()) data_fs::remove_tree(old);
}

void remove_stale_staging(const std::string& target) {
  const std::string parent = data_fs::parent_of(target), base = data_fs::base_of(target);
  for (const auto& name : data_fs::list_dir(parent))
    if (name.rfind(base + ".tmp-", 0) == 0 || name.rfind(base + ".old-", 0) == 0)
      data_fs::remove_tree(parent + "/" + name);
}

}  // namespace keel
