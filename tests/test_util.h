// Small helpers shared by the test programs.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "config/choice.h"
#include "distributed/dist_env.h"

namespace keel_test {

// Rank `rank` of a group of `world` on 127.0.0.1:port, as threads of one
// test process form it (source "test": distributed, not from torchrun).
inline keel::DistEnv thread_rank_env(int rank, int world, int port) {
  keel::DistEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_port = port;
  env.source = "test";
  return env;
}

// Runs `build/keel ARGS`, capturing stdout+stderr; returns the exit code.
int run_keel(const std::string& args, std::string* output);
// Starts `build/keel ARGS` in the background, stdout and stderr appended to
// `log`; returns its pid (for a signal, a kill, a wait).
int spawn_keel(const std::vector<std::string>& args, const std::string& log);
// Waits for `pid`; its exit code, or 128 + the signal that killed it, as a
// shell reports it; `killed` tells the two apart (keel exits 143 itself
// after a clean stop on SIGTERM).
int wait_exit(int pid, bool* killed = nullptr);
// A fresh empty directory under the system temp dir.
std::string make_temp_dir(const std::string& tag);
std::string source_path(const std::string& relative);
// Whole-file binary read and write (no std::filesystem: see src/util/fs.h).
std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);
// English-like text from a small grammar: `docs` documents of 8 sentences,
// separated by "%" lines. Deterministic in `seed`.
std::string make_sentence_corpus(unsigned seed, int docs);

// A choice key's enum value from its YAML name, for tests that loop over
// names ("pre", "post", ...); an unknown name is a bug in the test.
template <class E>
E as(const std::string& name) {
  if (auto e = keel::choice_from_name<E>(name)) return *e;
  throw std::invalid_argument("no such choice: " + name);
}

}  // namespace keel_test
