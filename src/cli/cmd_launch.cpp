// `keel launch --nproc N -- train CONFIG ...` (see dist/launcher.h).
#include "cli/commands.h"
#include "dist/launcher.h"

namespace keel {

int cmd_launch(const LaunchOptions& options) { return launch_workers(options); }

}  // namespace keel
