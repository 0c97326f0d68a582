// A path a user gives for "a checkpoint": a checkpoint directory itself (it
// has manifest.json), or a run directory, which stands for its newest valid
// checkpoint (as `keel sample`, `keel export-hf` and train.init_from read it).
#pragma once

#include <string>
#include <vector>

namespace keel {

// Throws CheckpointError when `path` is neither, or a run directory has no
// valid checkpoint. Newer invalid checkpoints that were skipped are appended
// to *skipped ("<path>: <why>") when given.
std::string resolve_checkpoint_dir(const std::string& path, std::vector<std::string>* skipped = nullptr);

// The same for a command: each skipped checkpoint is reported on stderr
// ("keel: skipping invalid checkpoint <path>: <why>").
std::string resolve_checkpoint_for_command(const std::string& path);

}  // namespace keel
