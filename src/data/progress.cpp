#include "data/progress.h"

#include <unistd.h>

#include <cstdio>

namespace keel {

Progress::Progress(std::string label, int64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_(total_bytes), enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::update(int64_t done) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(5000))) return;
  last_ = now;
  print(done, false);
}

void Progress::finish(int64_t done) {
  if (enabled_) print(done, true);
}

void Progress::print(int64_t done, bool final) {
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double mb = done / 1e6, rate = s > 0 ? mb / s : 0;
  char eta[32] = "";
  // The total is an estimate (gzip trailers, zstd frame headers), so the ETA is too; never negative.
  if (!final && rate > 0 && total_ > done) std::snprintf(eta, sizeof eta, "  ETA %.0fs", (total_ - done) / 1e6 / rate);
  std::fprintf(stderr, "%s%-9s %8.1f/%.1f MB  %6.1f MB/s  %5.1fs%s%s", tty_ ? "\r" : "", label_.c_str(), mb,
               total_ / 1e6, rate, s, eta, tty_ ? "\033[K" : "\n");
  if (final && tty_) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace keel
