#include "data/staging.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "util/error.h"
#include "util/fs.h"

namespace keel {

namespace {

bool is_symlink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// "<base><prefix>" followed by a suffix of the shape StagingDir gives it.
bool is_staging_leftover(const std::string& name, const std::string& base) {
  auto suffix_after = [&](const std::string& prefix, std::string* suffix) {
    if (name.rfind(base + prefix, 0) != 0) return false;
    *suffix = name.substr(base.size() + prefix.size());
    return true;
  };
  std::string s;
  if (suffix_after(".tmp-", &s))
    return s.size() == 6 && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c); });
  if (suffix_after(".old-", &s))
    return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
  return false;
}

}  // namespace

StagingDir::StagingDir(const std::string& target) : target_(target) {
  if (is_symlink(target))
    throw data_error(target, "is a symbolic link (to " + real_path(target) +
                                 "); keel prepare puts a new data directory in place by renaming it, which would "
                                 "replace the link and not fill what it points to: set data.dir to that directory");
  std::string tmpl = target + ".tmp-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw data_error(tmpl, std::string("cannot create: ") + std::strerror(errno));
  path_ = tmpl;
}

StagingDir::~StagingDir() {
  if (!path_.empty()) remove_tree_best_effort(path_);
}

void StagingDir::commit() {
  fsync_dir_best_effort(path_);  // file contents were fsynced as each was closed
  if (is_symlink(target_)) throw data_error(target_, "became a symbolic link while it was prepared; not replaced");
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
    if (is_staging_leftover(name, base)) remove_tree_best_effort(parent + "/" + name);
}

}  // namespace keel
