#include "data/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "data/data_error.h"

namespace keel::data_fs {

Kind kind_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Kind::missing;
  if (S_ISREG(st.st_mode)) return Kind::file;
  if (S_ISDIR(st.st_mode)) return Kind::directory;
  return Kind::other;
}

int64_t file_bytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw data_error(path, std::string("cannot stat: ") + std::strerror(errno));
  return static_cast<int64_t>(st.st_size);
}

void make_dirs(const std::string& path) {
  if (path.empty() || kind_of(path) == Kind::directory) return;
  std::string parent = parent_of(path);
  if (parent != path && parent != ".") make_dirs(parent);
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw data_error(path, std::string("cannot create directory: ") + std::strerror(errno));
}

void remove_tree(const std::string& path) {
  if (path.empty()) return;
  auto remove_one = [](const char* p, const struct stat*, int type, struct FTW*) -> int {
    (type == FTW_DP ? ::rmdir(p) : ::unlink(p));
    return 0;  // keep going: best effort
  };
  ::nftw(path.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw data_error(dir, std::string("cannot list directory: ") + std::strerror(errno));
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string parent_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string base_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string current_dir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string(".");
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace keel::data_fs
