// Bad input to export-hf / import-hf that is not a config key: a missing or
// malformed file, an occupied output directory. The CLI prints it and exits 2;
// refusals tied to config keys are ConfigError (model.*) instead.
#pragma once

#include <stdexcept>
#include <string>

namespace keel {

class InteropError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace keel
