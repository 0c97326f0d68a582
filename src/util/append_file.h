// A log file that takes whole lines or nothing. append() is write(2): each
// line reaches the kernel at once, and a full disk or a quota shows up as an
// errno right there, not never (a buffered stream that nobody checks) or in
// a later flush. A failed or short write cuts the file back to its length
// before, so no reader meets half a line and a line written again later
// (RunDir::restore_unwritten) starts on a line of its own.
//
// Header-only and on POSIX calls alone: the Logger (keel_log, below
// keel_base) and RunDir both use it; errors are errnos, which each caller
// turns into its own message (util/fs.h errno_text where it can).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>

namespace keel {

class AppendFile {
 public:
  AppendFile() = default;
  ~AppendFile() { close(); }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Opens `path` for appending, creating it: 0, or open(2)'s errno.
  int open(const std::string& path) {
    close();
    do fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    while (fd_ < 0 && errno == EINTR);
    return fd_ < 0 ? errno : 0;
  }
  bool is_open() const { return fd_ >= 0; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Appends all `size` bytes: 0, or the errno of the write that failed (EIO
  // for one that wrote nothing without saying why), the file as it was.
  int append(const char* data, size_t size) {
    if (fd_ < 0) return EBADF;
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd_, data + done, size - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      const int err = n < 0 ? errno : EIO;
      // A short write: take the part back (shrinking needs no space). One
      // writer per file (the run's lock), so with O_APPEND the file ends
      // with exactly the `done` bytes written here; no stat on every line.
      const off_t end = done > 0 ? ::lseek(fd_, 0, SEEK_END) : -1;
      if (end >= static_cast<off_t>(done)) {
        int r;
        do r = ::ftruncate(fd_, end - static_cast<off_t>(done));
        while (r != 0 && errno == EINTR);
      }
      return err;
    }
    return 0;
  }
  int append(const std::string& text) { return append(text.data(), text.size()); }

 private:
  int fd_ = -1;
};

}  // namespace keel
