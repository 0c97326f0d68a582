// SIGINT and SIGTERM as a request to stop at the next safe point, shared by
// every command that writes something it must not leave half-made (train,
// prepare). The handler only records the signal; the work polls for it.
#pragma once

#include <string>

#include "util/error.h"

namespace keel {

// Installs the handlers and clears any earlier request. With
// `second_signal_kills`, a second signal while the first is still being
// honoured ends the process at once (for work that polls rarely, such as
// training a tokenizer: what it leaves is a staging directory the next run
// removes).
void install_stop_handlers(bool second_signal_kills = false);
// The signal that asked to stop, or 0.
int stop_signal();
bool stop_requested();

// Work abandoned on a signal before it was finished: nothing half-made was
// kept. Exits 128 + the signal, as a shell would report it.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& message, int signal)
      : Error(message, "interrupted", exit_code::signal_base + signal) {}
};

// Throws Interrupted("<signal name> during <doing>; <kept>") when a stop was requested.
void throw_if_stop_requested(const std::string& doing, const std::string& kept);

}  // namespace keel
