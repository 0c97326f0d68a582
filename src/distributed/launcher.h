// `keel launch --nproc N -- train CONFIG ...`: starts N local workers of this
// same binary with the environment torchrun would give them (RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// forwards SIGINT/SIGTERM to them, and when one fails stops the others
// (SIGTERM, then SIGKILL after a grace period). For machines without torchrun.
#pragma once

#include <string>
#include <vector>

namespace keel {

struct LaunchOptions {
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;   // 0: a free port on this machine
  double grace_s = 30;   // after a failure, how long the others get to exit on SIGTERM
  std::vector<std::string> worker_args;  // e.g. {"train", "configs/default.yaml", "--set", "..."}
};

// Returns 0 when every worker exited 0; otherwise the exit code of the first
// worker that failed (128 + signal number when it was killed by a signal).
int launch_workers(const LaunchOptions& options);

// A TCP port nothing listens on right now (bind to port 0 and ask).
int find_free_port();

}  // namespace keel
