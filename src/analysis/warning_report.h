// keel report's "What warned first" section (sweep/early_warning.h over the
// sweep's runs): the signals each point's metrics.jsonl holds, against its
// loss divergence and, separately, its attention-logit instability.
#pragma once

#include <string>
#include <vector>

#include "analysis/early_warning.h"
#include "analysis/sweep_report.h"

namespace keel {

// Thresholds tried for every signal, as multiples of the run's baseline.
extern const std::vector<double> kWarningThresholds;

// The monitored signals of one run's metrics.jsonl (already checked by
// check_run_logs): loss, grad_norm, update_ratio, attn_l0_max_logit,
// attn_max_logit, output_max_logit, and with monitor.param_stats
// update_ratio_max (over matrices), update_ratio_block0_max, v_below_eps_mean,
// activation_max_abs.
RunSignals read_run_signals(const std::string& run_dir, const std::string& name, int64_t event_step);

// The markdown section (empty when no finished run had either event) and,
// in *csv, every (event, signal, threshold) row.
std::string warning_markdown(const std::string& sweep_dir, const std::vector<PointRow>& rows, std::string* csv);

}  // namespace keel
