#include "util/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>


namespace keel {

namespace {

const char* errno_hint(int err) {
  switch (err) {
    case ENOSPC: return "the disk is full: free space, or point run.out_dir (data.dir for keel prepare) at a larger disk";
    case EDQUOT: return "the disk quota is exhausted: free space or raise the quota";
    case EROFS: return "the file system is mounted read-only";
    case EACCES:
    case EPERM: return "permission denied: check the owner and mode of the directory";
    case ENOTDIR: return "a component of the path is a file, not a directory";
    case ENOENT: return "a component of the path does not exist";
    case EIO: return "the device reported an I/O error: check the disk (dmesg)";
    case EMFILE:
    case ENFILE: return "too many open files: raise the limit (ulimit -n)";
    case EXDEV: return "source and target are on different file systems";
    case ENAMETOOLONG: return "the path is too long";
    default: return nullptr;
  }
}

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw FileError(path + ": " + what + ": " + errno_text(err), exit_code_for_errno(err));
}

// open(2) that retries on EINTR.
int open_checked(const std::string& path, int flags, const std::string& what, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(path, what, errno);
  return fd;
}

void fsync_fd(int fd, const std::string& path) {
  // fsync is where a delayed write error (ENOSPC on thin provisioning, EIO)
  // finally shows up; ignoring it would mean trusting a file that is not there.
  while (::fsync(fd) != 0) {
    if (errno == EINTR) continue;
    // Directories on some file systems do not support fsync; that is not an error.
    if (errno == EINVAL) return;
    fail(path, "fsync failed", errno);
  }
}

}  // namespace

int exit_code_for_errno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EROFS:
    case EIO:
    case EACCES:
    case EPERM:
    case EMFILE:
    case ENFILE:
    case ENOMEM: return exit_code::environment;
    default: return exit_code::bad_input;
  }
}

std::string errno_text(int err) {
  std::string text = std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
  if (const char* hint = errno_hint(err)) text += "; " + std::string(hint);
  return text;
}

// ---------------------------------------------------------------- OutputFile

OutputFile::OutputFile(const std::string& path) : path_(path) {
  fd_ = open_checked(path, O_WRONLY | O_CREAT | O_TRUNC, "cannot create file for writing", 0644);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    // Linux writes at most ~2 GiB per call; loop over short writes.
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path_, "write failed after " + std::to_string(written_) + " bytes", errno);
    }
    if (n == 0) fail(path_, "write made no progress after " + std::to_string(written_) + " bytes", EIO);
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void OutputFile::sync() { fsync_fd(fd_, path_); }

void OutputFile::close() {
  if (fd_ < 0) return;
  int fd = fd_;
  fd_ = -1;
  // Do not retry close on EINTR: on Linux the descriptor is already released.
  if (::close(fd) != 0 && errno != EINTR) fail(path_, "close failed", errno);
}

// ----------------------------------------------------------------- InputFile

InputFile::InputFile(const std::string& path) : path_(path) {
  fd_ = open_checked(path, O_RDONLY, "cannot open file for reading");
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    fail(path, "fstat failed", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw FileError(path + ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read_at(void* data, size_t size, uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd_, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path_, "read at byte " + std::to_string(offset) + " failed", errno);
    }
    if (n == 0)
      throw FileError(path_ + ": unexpected end of file at byte " + std::to_string(offset) +
                                        " (file truncated while reading?)");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

// -------------------------------------------------------------- whole files

void write_file_durably(const std::string& path, const std::string& content) {
  OutputFile f(path);
  f.write(content);
  f.sync();
  f.close();
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  try {
    write_file_durably(tmp, content);
    rename_path(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(dir_name(path));
}

std::string read_small_file(const std::string& path, uint64_t max_size) {
  InputFile f(path);
  if (f.size() > max_size)
    throw FileError(path + ": file is " + std::to_string(f.size()) + " bytes, more than the " +
                                     std::to_string(max_size) + " expected");
  std::string text(f.size(), '\0');
  f.read_at(text.data(), text.size(), 0);
  return text;
}

namespace {
void fsync_path(const std::string& path, int flags, const char* what) {
  int fd = open_checked(path, O_RDONLY | flags, what);
  try {
    fsync_fd(fd, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}
}  // namespace

void fsync_file(const std::string& path) { fsync_path(path, 0, "cannot open file to fsync it"); }

void fsync_dir(const std::string& dir) { fsync_path(dir, O_DIRECTORY, "cannot open directory to fsync it"); }

void ensure_directory(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw FileError(dir + ": exists but is not a directory");
    return;
  }
  const std::string parent = dir_name(dir);
  if (parent != dir) ensure_directory(parent);
  if (::mkdir(dir.c_str(), 0755) != 0) {
    if (errno == EEXIST && is_directory(dir)) return;  // created concurrently
    fail(dir, "cannot create directory", errno);
  }
  // The new name is durable only once its parent directory is synced.
  fsync_dir(parent);
}

FileDigest digest_file(const std::string& path) {
  InputFile f(path);
  FileDigest d;
  d.size = f.size();
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<unsigned char> buf(1u << 20);
  for (uint64_t off = 0; off < d.size;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), d.size - off));
    f.read_at(buf.data(), n, off);
    crc = crc32_z(crc, buf.data(), n);
    off += n;
  }
  d.crc32 = static_cast<uint32_t>(crc);
  return d;
}

uint64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) fail(path, "cannot stat file", errno);
  if (!S_ISREG(st.st_mode)) throw FileError(path + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail(from, "cannot rename to " + to, errno);
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0) fail(path, "cannot remove file", errno);
}

namespace {
std::string strip_trailing_slashes(std::string p);
}  // namespace

// A trailing slash ("link/") would make lstat follow a link and the walk
// below empty its target: the name is taken without it.
void remove_tree(const std::string& path_in) {
  const std::string path = strip_trailing_slashes(path_in);
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    fail(path, "cannot stat for removal", errno);
  }
  if (S_ISDIR(st.st_mode)) {
    for (const auto& name : list_directory(path)) remove_tree(path + "/" + name);
    if (::rmdir(path.c_str()) != 0) fail(path, "cannot remove directory", errno);
  } else if (::unlink(path.c_str()) != 0) {
    fail(path, "cannot remove file", errno);
  }
}

std::vector<std::string> list_directory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) fail(dir, "cannot open directory", errno);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* e = ::readdir(d);
    if (!e) break;
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  int err = errno;
  ::closedir(d);
  if (err != 0) fail(dir, "cannot list directory", err);
  std::sort(names.begin(), names.end());
  return names;
}

void remove_tree_best_effort(const std::string& path) {
  if (path.empty()) return;
  const std::string name = strip_trailing_slashes(path);  // as in remove_tree
  auto remove_one = [](const char* p, const struct stat*, int type, struct FTW*) -> int {
    (type == FTW_DP ? ::rmdir(p) : ::unlink(p));
    return 0;  // keep going
  };
  ::nftw(name.c_str(), remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

void fsync_dir_best_effort(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

PathKind path_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return PathKind::missing;
  if (S_ISREG(st.st_mode)) return PathKind::file;
  if (S_ISDIR(st.st_mode)) return PathKind::directory;
  return PathKind::other;
}

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;
}

std::string current_dir() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string(".");
}

namespace {
std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}
}  // namespace

std::string base_name(const std::string& path) {
  std::string p = strip_trailing_slashes(path);
  size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  std::string p = strip_trailing_slashes(path);
  size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

}  // namespace keel
