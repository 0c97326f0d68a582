// `keel sweep SWEEP.yaml` and `keel report SWEEP_DIR` (src/sweep/).
#include "cli/commands.h"
#include "sweep/sweep_report.h"
#include "sweep/sweep_runner.h"

namespace keel {

int cmd_sweep(const std::string& sweep_path, const SweepOptions& options) { return run_sweep(sweep_path, options); }

int cmd_report(const std::string& sweep_dir, const ReportOptions& options) { return write_report(sweep_dir, options); }

}  // namespace keel
