// CheckpointError: every problem with writing, reading or validating a
// checkpoint or a safetensors file. The message always names the file (or
// directory) and says what is wrong, with byte offsets where they help and
// the system's errno text plus a hint when a system call failed.
#pragma once

#include <stdexcept>
#include <string>

namespace keel {

class CheckpointError : public std::runtime_error {
 public:
  explicit CheckpointError(const std::string& message) : std::runtime_error(message) {}
};

// "path: message", the form every checkpoint error takes.
inline CheckpointError checkpoint_error(const std::string& path, const std::string& message) {
  return CheckpointError(path + ": " + message);
}

}  // namespace keel
