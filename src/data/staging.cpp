#include "data/staging.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"

namespace keel {

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
