#include "util/error.h"

#include <unistd.h>

#include <cerrno>

#include <iostream>

namespace keel {

void ConfigErrors::add(const std::string& path, const std::string& message) {
  items.push_back(path + ": " + message);
}

std::string ConfigErrors::joined() const {
  std::string out;
  for (const auto& item : items) out += "  error: " + item + "\n";
  return out;
}

int exit_code_of(const std::exception& e) {
  if (const auto* k = dynamic_cast<const Error*>(&e)) return k->exit_code();
  return exit_code::internal;
}

int report_error(const std::exception& e) {
  const auto* k = dynamic_cast<const Error*>(&e);
  const std::string kind = k ? k->kind() : "error";
  const std::string what = e.what();
  // A multi-line message (every config problem) starts on its own line.
  if (what.find('\n') != std::string::npos && what.back() == '\n')
    write_stderr("keel: " + kind + ":\n" + what);
  else
    write_stderr("keel: " + kind + ": " + what + "\n");
  return exit_code_of(e);
}

void write_stderr(const std::string& text) {
  std::cerr.flush();  // what was written through the stream first stays first
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing more to do
    done += static_cast<size_t>(n);
  }
}

}  // namespace keel
