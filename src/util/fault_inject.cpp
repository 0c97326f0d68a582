#include "util/fault_inject.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace keel {

std::optional<FaultSpec> fault_spec() {
  const char* env = std::getenv("KEEL_FAULT_INJECT");
  if (!env) return std::nullopt;
  const std::string spec = env;
  const size_t colon = spec.find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  return FaultSpec{spec.substr(0, colon), spec.substr(colon + 1)};
}

void fault_point(const std::string& point, const std::string& argument) {
  const auto spec = fault_spec();
  if (!spec || spec->point != point || spec->argument != argument) return;
  // write(2), not iostreams: nothing buffered should survive the kill anyway.
  const std::string line = "keel: KEEL_FAULT_INJECT=" + point + ":" + argument + ": killing this process\n";
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);  // not reached
}

namespace {
// A positive integer, or 0 for anything else (a malformed spec plants nothing).
int64_t positive(const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  return end && *end == '\0' && !text.empty() && v > 0 ? v : 0;
}
}  // namespace

TrainFaults TrainFaults::from_environment(int rank) {
  TrainFaults f;
  const auto spec = fault_spec();
  if (!spec) return f;
  if (spec->point == "nan_loss_at_step") f.nan_loss_at_step = positive(spec->argument);
  if (spec->point == "loss_x10_at_step") f.loss_x10_at_step = positive(spec->argument);
  if (spec->point == "sigterm_at_step") f.sigterm_at_step = positive(spec->argument);
  if (spec->point == "momentum_x1000_at_step") f.momentum_x1000_at_step = positive(spec->argument);
  if (spec->point == "fp16_overflow_block") {
    char* end = nullptr;
    const long long k = std::strtoll(spec->argument.c_str(), &end, 10);
    if (!spec->argument.empty() && *end == '\0' && k >= 0) f.fp16_overflow_block = k;
  }
  if (spec->point == "kill_rank_at_step" || spec->point == "hang_rank_at_step") {
    const size_t colon = spec->argument.find(':');
    if (colon == std::string::npos) return f;
    const std::string r = spec->argument.substr(0, colon);
    if (r != std::to_string(rank)) return f;
    (spec->point[0] == 'k' ? f.kill_at_step : f.hang_at_step) = positive(spec->argument.substr(colon + 1));
  }
  return f;
}

int injected_append_errno(const std::string& file_name, int64_t appended) {
  const auto spec = fault_spec();
  if (!spec || spec->point != "enospc_after") return 0;
  const size_t colon = spec->argument.rfind(':');
  if (colon == std::string::npos || spec->argument.substr(0, colon) != file_name) return 0;
  const std::string n = spec->argument.substr(colon + 1);
  char* end = nullptr;
  const long long after = std::strtoll(n.c_str(), &end, 10);  // 0: the very first append fails
  if (n.empty() || *end != '\0' || after < 0) return 0;       // malformed: plants nothing
  return appended >= after ? ENOSPC : 0;
}

}  // namespace keel
