// Who this process is in a data-parallel job, read from the environment that
// torchrun (and `keel launch`) set: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Under SLURM (srun without
// torchrun) the SLURM_* variables are understood instead. Without either, the
// process is a job of one.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "util/error.h"

namespace keel {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "single";  // "single" | "torchrun" | "slurm"
  // Started by torchrun, keel launch or a multi-task srun: a process group is
  // formed even for a world of one (so one GPU exercises the NCCL path).
  bool distributed() const { return source != "single"; }
};

using EnvMap = std::map<std::string, std::string>;

// Pure function of the given variables (testable); throws DistError naming
// the variable that is missing or wrong.
DistEnv parse_dist_env(const EnvMap& env);

// The variables parse_dist_env looks at, from this process's environment.
EnvMap current_dist_environment();

// First host of a SLURM node list: "gpu[03-05,09],cpu1" -> "gpu03".
std::string first_host_of_nodelist(const std::string& nodelist);

}  // namespace keel
