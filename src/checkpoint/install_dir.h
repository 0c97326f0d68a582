// Putting a finished checkpoint directory in place with rename(2), the one
// step that makes it visible all at once (docs/papers.md#checkpoint-and-resume).
#pragma once

#include <string>

namespace keel {

enum class InstallMode {
  // Linux renameat2(RENAME_EXCHANGE) swaps a new and an existing directory in
  // one atomic step, so there is never a moment without a checkpoint of that
  // step; falls back to two_renames where the file system lacks it (NFS).
  exchange_if_supported,
  // Move the existing directory aside, then the new one in. A crash between
  // the two leaves the old copy under `aside`, so no data is lost, but the
  // step is missing until someone renames it back.
  two_renames,
};

// Renames directory `src` to `dst`. If `dst` already exists it is replaced
// and the path now holding its old contents is returned (`src` after an
// exchange, `aside` after two renames) for the caller to delete; otherwise
// returns "". The caller fsyncs the parent directory afterwards.
std::string install_directory(const std::string& src, const std::string& dst, const std::string& aside,
                              InstallMode mode = InstallMode::exchange_if_supported);

}  // namespace keel
