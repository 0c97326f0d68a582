// Logging behind a narrow interface. spdlog is compiled in log.cpp alone,
// without LibTorch's include path: the PyTorch wheel ships fmt 12 headers
// there, which shadow the Debian fmt 9 that Debian's spdlog 1.10 is built on.
#pragma once

#include <memory>
#include <string>

namespace keel {

class Logger {
 public:
  // Logs to stderr, and also appends to `file_path` when it is not empty.
  // A line the file refuses (a full disk, a quota) is reported on stderr at
  // once, naming the file and the errno; the file then gets no more lines
  // (stderr still does) and file_errno() says why, for the caller to act on.
  explicit Logger(const std::string& file_path = "");
  ~Logger();
  void info(const std::string& message);
  void warn(const std::string& message);
  void error(const std::string& message);
  // Warnings and errors only, each line tagged (e.g. "[rank 1]"): what a
  // data-parallel worker other than rank 0 prints.
  void quiet(const std::string& tag);
  // The errno of the file's first failed append, or 0.
  int file_errno() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// printf-style formatting into a std::string.
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace keel
