// keel's one file layer, on POSIX calls. Every function that can fail throws
// FileError "path: what failed: strerror (errno N); hint", so a full disk or
// a read-only mount reads as such and not as corrupt data later; the few
// that may not fail say so in their name (..._best_effort). Durability needs
// fsync on the file AND on the directory holding its name
// (docs/papers.md#checkpoint-and-resume); these helpers make both one-liners.
//
// Not std::filesystem: libtorch.so exports its own copies of many
// std::filesystem functions, which then interpose on libstdc++'s, and some
// (remove_all at least) crash when called through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace keel {

// A file or directory could not be read, written, created or removed. Exit 2
// (the path or its content is the input to fix) unless the errno says the
// machine refused: a full disk, a quota, a read-only mount, an I/O error, a
// permission, too many open files, which exit 4 (environment).
class FileError : public Error {
 public:
  explicit FileError(const std::string& message, int exit_code = exit_code::bad_input)
      : Error(message, "file error", exit_code) {}
};

// The exit code a failed system call's errno deserves (see FileError).
int exit_code_for_errno(int err);

// "strerror(err) (errno N)" plus a hint for the errors a user can fix
// (ENOSPC, EDQUOT, EROFS, EACCES, ...).
std::string errno_text(int err);

// A file opened for writing (created or truncated). Writes go straight to the
// kernel; sync() is fsync; close() reports errors that only show up on close
// (NFS, quota). The destructor closes silently: call close() to see errors.
class OutputFile {
 public:
  explicit OutputFile(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  void sync();
  void close();
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// A regular file opened for reading, with its size; read_at() is pread that
// either fills the whole buffer or throws (naming the offset).
class InputFile {
 public:
  explicit InputFile(const std::string& path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  void read_at(void* data, size_t size, uint64_t offset);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes `content` to `path` and fsyncs it.
void write_file_durably(const std::string& path, const std::string& content);
// Replaces `path` all at once: a temporary file beside it (removed again on
// failure), fsync, rename, fsync of the directory. Readers see the old or the
// new content, never a part.
void write_file_atomic(const std::string& path, const std::string& content);
// Whole file as a string (for small files such as manifests).
std::string read_small_file(const std::string& path, uint64_t max_size = 64u << 20);
// fsync an existing file (written by someone else, e.g. a callback).
void fsync_file(const std::string& path);
// fsync a directory, which makes the names created/renamed/removed in it durable.
void fsync_dir(const std::string& dir);
// mkdir -p; fsyncs the parent of every directory it creates. Throws if a
// component exists but is not a directory.
void ensure_directory(const std::string& dir);
// Size and zlib CRC-32 of a whole file, read in 1 MiB chunks.
struct FileDigest {
  uint64_t size = 0;
  uint32_t crc32 = 0;
};
FileDigest digest_file(const std::string& path);
// Size of a regular file; throws (with errno text) if it is missing.
uint64_t file_size(const std::string& path);
bool path_exists(const std::string& path);  // lstat: a dangling symlink exists
bool is_directory(const std::string& path);
enum class PathKind { missing, file, directory, other };
PathKind path_kind(const std::string& path);  // follows symlinks
// rename(2), checked.
void rename_path(const std::string& from, const std::string& to);
// unlink(2), checked.
void remove_file(const std::string& path);
// rm -rf; throws with the first error. A symlink, in the tree or as `path`
// itself (with or without a trailing slash), is removed, never followed. POSIX, not
// std::filesystem::remove_all: libtorch.so exports its own copies of the
// std::filesystem functions, and calling remove_all through it crashes.
void remove_tree(const std::string& path);
// rm -rf that never throws (cleaning up after a failure): what it cannot remove stays.
void remove_tree_best_effort(const std::string& path);
// fsync a directory, ignoring errors (a name whose durability is a bonus).
void fsync_dir_best_effort(const std::string& dir);
// Names in a directory, without "." and "..", sorted bytewise.
std::vector<std::string> list_directory(const std::string& dir);
// "a/b/c" -> "c" and "a/b"; "c" -> "c" and ".". Trailing slashes ignored.
std::string base_name(const std::string& path);
std::string dir_name(const std::string& path);
std::string real_path(const std::string& path);  // realpath(3), or `path` if that fails
std::string current_dir();

}  // namespace keel
