// keel's errors. A failure whose fix is in the user's input (a config key, a
// data file, a checkpoint, a run directory, a distributed setup, a Hugging
// Face file) is a keel::Error that carries the exit code the process ends
// with: 2 for bad input, 4 for the environment. main() turns any exception into a message and an
// exit code in one place (report_error), and the data-parallel setup vote
// uses the same codes (exit_code_of). Anything else is a bug in keel: exit 1.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace keel {

namespace exit_code {
// One table for every command (keel --help, docs/reliability.md#exit-codes).
constexpr int ok = 0;            // finished what was asked
constexpr int internal = 1;      // a bug in keel, or a failure keel cannot attribute
constexpr int bad_input = 2;     // config, data, checkpoint, run directory, setup: the message says what to fix
constexpr int stopped = 3;       // training stopped by its own rule: non-finite halt, divergence, max rewinds
constexpr int nonfinite = stopped;
constexpr int environment = 4;   // the machine, not the input: disk full, permission, I/O error, a peer that failed
constexpr int sweep_failed = 5;  // a sweep ran to its end but some points failed (each point's code in its record)
constexpr int signal_base = 128; // stopped cleanly on a signal: 128 + its number (130 SIGINT, 143 SIGTERM)
}  // namespace exit_code

class Error : public std::runtime_error {
 public:
  // `kind` prefixes the message when it is printed: "keel: <kind>: <message>".
  Error(const std::string& message, std::string kind, int exit_code = exit_code::bad_input)
      : std::runtime_error(message), kind_(std::move(kind)), exit_code_(exit_code) {}
  const std::string& kind() const noexcept { return kind_; }
  int exit_code() const noexcept { return exit_code_; }

 protected:
  void set_kind(std::string kind) { kind_ = std::move(kind); }

 private:
  std::string kind_;
  int exit_code_;
};

// Every problem found in a config, one line each ("key.path: message").
struct ConfigErrors {
  std::vector<std::string> items;
  void add(const std::string& path, const std::string& message);
  bool empty() const { return items.empty(); }
  std::string joined() const;
};

// A config that cannot run: all its problems at once.
class ConfigError : public Error {
 public:
  explicit ConfigError(const ConfigErrors& errors)
      : Error(errors.joined(), "invalid configuration"), errors_(errors) {}
  const ConfigErrors& errors() const { return errors_; }

 private:
  ConfigErrors errors_;
};

// The data itself: missing or unreadable sources, malformed text, corrupted
// shards, a tokenizer that does not match the config. Names the file and,
// where it helps, the line or byte offset.
class DataError : public Error {
 public:
  explicit DataError(const std::string& message) : Error(message, "data error") {}
};
inline DataError data_error(const std::string& path, const std::string& message) {
  return DataError(path + ": " + message);
}

// Writing, reading or validating a checkpoint or safetensors file: names the
// file, says what is wrong, with byte offsets and errno text where they help.
class CheckpointError : public Error {
 public:
  explicit CheckpointError(const std::string& message) : Error(message, "checkpoint error") {}
};
inline CheckpointError checkpoint_error(const std::string& path, const std::string& message) {
  return CheckpointError(path + ": " + message);
}

// A run or sweep directory that may not be used (exists, not ours, held).
class RunDirError : public Error {
 public:
  explicit RunDirError(const std::string& message) : Error(message, "run directory") {}
};

// export-hf / import-hf input that is not a config key: a missing or
// malformed file, an occupied output directory.
class InteropError : public Error {
 public:
  explicit InteropError(const std::string& message) : Error(message, "interop") {}
};

// A distributed setup that cannot work: bad environment, port in use,
// unreachable master, ranks that disagree.
class DistError : public Error {
 public:
  explicit DistError(const std::string& message) : Error(message, "distributed setup") {}
};

// NCCL ranks that would share one GPU, which NCCL refuses: its own kind, so
// scripts (the GPU check) can tell this expected refusal from other failures
// by "keel: shared GPU:" rather than by the message's prose.
class SharedGpuError : public DistError {
 public:
  static constexpr const char* kKind = "shared GPU";
  explicit SharedGpuError(const std::string& message) : DistError(message) { set_kind(kKind); }
};

// A collective with the other ranks failed (a peer died, hung, or left):
// not this rank's input, so not exit 2: the environment's.
class PeerFailure : public Error {
 public:
  explicit PeerFailure(const std::string& message) : Error(message, "data parallel", exit_code::environment) {}
};

// The machine refused: a full disk, a quota, a read-only file system, an I/O
// error, a permission. Nothing in the input to fix, so not exit 2.
class EnvironmentError : public Error {
 public:
  explicit EnvironmentError(const std::string& message, std::string kind = "environment")
      : Error(message, std::move(kind), exit_code::environment) {}
};

// Another rank's setup failed: this rank exits with that rank's code.
class RemoteRankError : public Error {
 public:
  RemoteRankError(const std::string& message, int code) : Error(message, "another rank", code) {}
};

// The exit code an exception ends the process with: an Error's own, else 1.
int exit_code_of(const std::exception& e);
// Prints "keel: <kind>: <message>" to stderr and returns exit_code_of(e).
int report_error(const std::exception& e);

// Writes `text` to standard error in one write(2) (retrying the rest of a
// partial write): processes sharing a pipe (keel launch and its workers)
// then never interleave inside each other's lines, as chained `std::cerr <<`
// did, cutting "rank 1" in two.
void write_stderr(const std::string& text);

}  // namespace keel
