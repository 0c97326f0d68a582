// Child keel processes: `keel sweep` runs its points and `keel replay` its
// branches as `keel train` children of the same binary, each with its output
// in a log file, and `keel launch` starts its ranks from the same binary.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace keel {

// This process's executable (/proc/self/exe), to start children of the same keel.
std::string self_exe();

// Starts `args` (args[0] the program) with stdout and stderr appended to
// `log_path`, stdin from /dev/null, and this environment with `env_set`
// ("NAME=value") replacing the same names. The child gets SIGTERM when this
// process dies (kill -9 included), so it checkpoints and stops instead of
// running on unseen. Returns its pid; throws when fork fails.
pid_t start_logged_child(const std::vector<std::string>& args, const std::string& log_path,
                         const std::vector<std::string>& env_set = {});

// A wait status as a shell reports it: the exit code, or 128 + the signal.
int exit_code_of(int wait_status);

}  // namespace keel
