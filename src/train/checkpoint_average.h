// `keel average RUN_DIR --last N`: the mean of the weights of a run's newest
// N valid checkpoints (OLMo-core's checkpoint averaging;
// docs/papers.md#weight-averaging), written as a weights-only checkpoint of
// its own run directory, so that keel eval, export-hf and sample read it as
// they read any run. Buffers (σReparam's vectors, a fixed L2 temperature)
// come from the newest checkpoint; the sums are taken in fp64.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

struct AverageResult {
  std::string out_dir;        // the new run directory
  std::string checkpoint;     // its one checkpoint
  std::vector<int64_t> steps; // the checkpoints averaged, oldest first
};

// Throws ConfigError (--last below 1 or above the checkpoints there are),
// RunDirError (RUN_DIR is no run; OUT_DIR exists and holds files and `force`
// is false), CheckpointError (a checkpoint of another architecture).
AverageResult average_checkpoints(const std::string& run_dir, int64_t last, const std::string& out_dir, bool force);

// The default OUT_DIR: RUN_DIR/averages/last<N>_step<S>.
std::string default_average_dir(const std::string& run_dir, int64_t last, int64_t newest_step);

}  // namespace keel
