// `keel sweep`: runs every point of a sweep file as a child `keel train`
// process (the same binary, /proc/self/exe) with --set overrides and
// --resume auto, one after another or --parallel N at once with the cores
// split between them. Re-running the same command skips finished points and
// resumes interrupted ones; a sweep file whose settings changed for points
// that already exist is refused (sweep_manifest.h).
#pragma once

#include <string>
#include <vector>

namespace keel {

struct SweepOptions {
  int parallel = 1;                    // points running at once
  int threads = 0;                     // CPU threads per point; 0 = cores / parallel
  std::string out_dir;                 // replaces the sweep file's out_dir
  std::vector<std::string> overrides;  // --set for every point (part of the settings compared on re-run)
  std::vector<std::string> only;       // run only points whose names match one of these globs
  bool dry_run = false;                // print the plan and each point's state, run nothing
  double progress_every_s = 30;        // progress line interval (also on every start and end)
  std::string command_line;            // recorded in sweep.json
};

// Returns the exit code: 0 every selected point finished (completed or
// diverged), 1 some point failed, 128+signal when interrupted.
int run_sweep(const std::string& sweep_file, const SweepOptions& options);

// CPUs this process may run on (sched_getaffinity), at least 1.
int available_cores();

}  // namespace keel
