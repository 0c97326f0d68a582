// DataError: every problem with the data itself (missing or unreadable
// sources, malformed text, corrupted shards, a tokenizer that does not match
// the config). The message names the file and, where it helps, the line or
// byte offset. The CLI maps it to exit code 2, like a config error: the fix
// is in the user's input, not in keel.
#pragma once

#include <stdexcept>
#include <string>

namespace keel {

class DataError : public std::runtime_error {
 public:
  explicit DataError(const std::string& message) : std::runtime_error(message) {}
};

// "path: message", the form every data error takes.
inline DataError data_error(const std::string& path, const std::string& message) {
  return DataError(path + ": " + message);
}

}  // namespace keel
