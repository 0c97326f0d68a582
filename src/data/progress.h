// A one-line progress report on stderr: "encode  12.3/40.1 MB  5.2 MB/s  ETA 5s".
// On a terminal the line is redrawn in place a few times a second; otherwise
// (logs, CI) a full line is printed every few seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace keel {

class Progress {
 public:
  Progress(std::string label, int64_t total_bytes, bool enabled);
  void update(int64_t done_bytes);  // cheap; prints only when due
  void finish(int64_t done_bytes);  // final line (on a terminal, ends it)

 private:
  void print(int64_t done_bytes, bool final);
  std::string label_;
  int64_t total_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace keel
