#include "distributed/dist_env.h"

#include <cstdlib>
#include <vector>

namespace keel {

namespace {

const char* const kVariables[] = {"RANK",          "WORLD_SIZE",        "LOCAL_RANK",    "LOCAL_WORLD_SIZE",
                                  "MASTER_ADDR",   "MASTER_PORT",       "SLURM_PROCID",  "SLURM_NTASKS",
                                  "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_NODELIST",
                                  "SLURM_JOB_NODELIST"};

const std::string* find(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int parse_int(const EnvMap& env, const std::string& name, int min_value) {
  const std::string* v = find(env, name);
  if (!v) throw DistError("environment variable " + name + " is not set");
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(*v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // SLURM_NTASKS_PER_NODE may read "4(x2)": the count comes first.
  const bool slurm_repeat = name == "SLURM_NTASKS_PER_NODE" && used > 0 && used < v->size() && (*v)[used] == '(';
  if (used == 0 || (used != v->size() && !slurm_repeat))
    throw DistError("environment variable " + name + "='" + *v + "' is not an integer");
  if (n < min_value) throw DistError(name + "=" + *v + " must be at least " + std::to_string(min_value));
  return static_cast<int>(n);
}

int parse_port(const EnvMap& env) {
  if (!find(env, "MASTER_PORT")) return 29500;  // torchrun's default
  int port = parse_int(env, "MASTER_PORT", 1);
  if (port > 65535) throw DistError("MASTER_PORT=" + std::to_string(port) + " is not a TCP port (1-65535)");
  return port;
}

}  // namespace

std::string first_host_of_nodelist(const std::string& nodelist) {
  std::string first = nodelist.substr(0, nodelist.find(','));
  const size_t open = nodelist.find('[');
  if (open == std::string::npos || open > first.size()) return first;
  // The prefix, then the first number (or range start) inside the brackets.
  const std::string prefix = nodelist.substr(0, open);
  size_t end = nodelist.find_first_of("-,]", open + 1);
  if (end == std::string::npos) throw DistError("cannot read the SLURM node list '" + nodelist + "'");
  return prefix + nodelist.substr(open + 1, end - open - 1);
}

DistEnv parse_dist_env(const EnvMap& env) {
  DistEnv d;
  if (find(env, "RANK") || find(env, "WORLD_SIZE")) {
    d.source = "torchrun";
    d.world_size = parse_int(env, "WORLD_SIZE", 1);
    d.rank = parse_int(env, "RANK", 0);
    d.local_rank = find(env, "LOCAL_RANK") ? parse_int(env, "LOCAL_RANK", 0) : d.rank;
    d.local_world_size = find(env, "LOCAL_WORLD_SIZE") ? parse_int(env, "LOCAL_WORLD_SIZE", 1) : d.world_size;
    if (d.world_size > 1 && !find(env, "MASTER_ADDR"))
      throw DistError("WORLD_SIZE=" + std::to_string(d.world_size) +
                      " but MASTER_ADDR is not set: every rank needs the address of rank 0's rendezvous");
    if (const std::string* a = find(env, "MASTER_ADDR")) d.master_addr = *a;
  } else if (find(env, "SLURM_NTASKS") && parse_int(env, "SLURM_NTASKS", 1) > 1) {
    d.source = "slurm";
    d.world_size = parse_int(env, "SLURM_NTASKS", 1);
    d.rank = parse_int(env, "SLURM_PROCID", 0);
    d.local_rank = find(env, "SLURM_LOCALID") ? parse_int(env, "SLURM_LOCALID", 0) : 0;
    d.local_world_size = find(env, "SLURM_NTASKS_PER_NODE") ? parse_int(env, "SLURM_NTASKS_PER_NODE", 1) : 1;
    if (const std::string* a = find(env, "MASTER_ADDR")) {
      d.master_addr = *a;
    } else {
      const std::string* list = find(env, "SLURM_STEP_NODELIST");
      if (!list) list = find(env, "SLURM_JOB_NODELIST");
      if (!list) throw DistError("SLURM job without MASTER_ADDR or SLURM_JOB_NODELIST: cannot find rank 0's host");
      d.master_addr = first_host_of_nodelist(*list);
    }
  } else {
    return d;
  }
  d.master_port = parse_port(env);
  if (d.rank >= d.world_size)
    throw DistError("rank " + std::to_string(d.rank) + " is not below the world size " +
                    std::to_string(d.world_size) + " (" + (d.source == "slurm" ? "SLURM_PROCID/SLURM_NTASKS" : "RANK/WORLD_SIZE") + ")");
  if (d.local_rank >= d.local_world_size)
    throw DistError("local rank " + std::to_string(d.local_rank) + " is not below the local world size " +
                    std::to_string(d.local_world_size));
  if (d.local_world_size > d.world_size)
    throw DistError("LOCAL_WORLD_SIZE=" + std::to_string(d.local_world_size) + " exceeds WORLD_SIZE=" +
                    std::to_string(d.world_size));
  return d;
}

EnvMap current_dist_environment() {
  EnvMap env;
  for (const char* name : kVariables)
    if (const char* v = std::getenv(name)) env[name] = v;
  return env;
}

}  // namespace keel
