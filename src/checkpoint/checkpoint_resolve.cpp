#include "checkpoint/checkpoint_resolve.h"

#include <iostream>

#include "util/error.h"
#include "checkpoint/checkpoint_store.h"
#include "util/fs.h"

namespace keel {

std::string resolve_checkpoint_dir(const std::string& path, std::vector<std::string>* skipped) {
  if (path_exists(path + "/manifest.json")) return path;
  if (is_directory(path + "/checkpoints")) {
    auto latest = CheckpointStore(path).latest_valid(skipped);
    if (latest) return *latest;
    throw CheckpointError(path + ": run directory has no valid checkpoint");
  }
  throw CheckpointError(path + ": neither a checkpoint (no manifest.json) nor a run directory (no checkpoints/)");
}

std::string resolve_checkpoint_for_command(const std::string& path) {
  std::vector<std::string> skipped;
  std::string dir = resolve_checkpoint_dir(path, &skipped);
  for (const auto& s : skipped) std::cerr << "keel: skipping invalid checkpoint " << s << "\n";
  return dir;
}

}  // namespace keel
