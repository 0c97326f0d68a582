// `keel prepare CONFIG [--set k=v ...] [--force] [--verify]`: builds data.dir
// from data.sources (see src/data/prepare.h). Exit codes: 0 ok (built, or
// already prepared with the same settings), 2 bad config or bad data.
#pragma once

#include <string>
#include <vector>

namespace keel {

struct PrepareCliOptions {
  bool force = false;   // --force: rebuild data.dir even if it exists
  bool verify = false;  // --verify: only check an existing data.dir (every shard's checksum and ids)
  bool quiet = false;   // --quiet: no progress lines
};

int cmd_prepare(const std::string& config_path, const std::vector<std::string>& overrides,
                const PrepareCliOptions& options = {});

}  // namespace keel
