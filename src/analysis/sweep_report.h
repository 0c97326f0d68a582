// `keel report SWEEP_DIR`: summary.csv (one row per point), lr_sensitivity.csv
// (one row per variant), report.md, and plots drawn by
// scripts/plots/plot_sweep.py (matplotlib) into plots/ as PNG and SVG. A README.md
// (or, as older result folders name it, notes.md) in the output directory, a
// hand-written reading of the results, is placed at the top of report.md, so
// regenerating the report keeps it.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/lr_sensitivity.h"
#include "analysis/study_stats.h"

namespace keel {

struct ReportOptions {
  std::string out_dir;  // where report.md, the CSVs and plots/ go; default SWEEP_DIR
  bool plots = true;
  std::string python;   // interpreter for the plotting script; default: see find_python()
  double degradation_margin = 0.1;  // nats: the degradation criterion's (edge_criteria.h, kDefaultDegradationMargin)
  double target_width = 1024;       // d_model the edge-across-width fit extrapolates to (edge_width.h)
};

// A downstream task's result at a run's last task evaluation (eval.tasks);
// NaN where the record has no such number (acc_norm: not every task kind).
struct TaskAccuracy {
  double acc = NAN, acc_stderr = NAN, acc_norm = NAN;
};

// One point's results, from sweep.json, summary.json.
struct PointRow {
  std::string name;
  // The point's values on every axis but train.lr and run.seed ("rms-head",
  // "rms-head_d_model=256"); "all" when the grid has no other axis.
  std::string variant;
  std::string condition;  // the variant axis's label alone ("all" without one)
  std::string size;       // the size axis's label ("" without one)
  int64_t parameters = 0, non_embedding_parameters = 0;  // from summary.json (0: not known)
  std::string status;  // completed | diverged | nonfinite | interrupted | not run
  double lr = NAN;
  int64_t seed = 0;
  int64_t steps = 0, max_steps = 0;
  int64_t vocab_size = 0;
  int64_t d_model = 0, n_layers = 0;  // from the point's config (the transfer section's size)
  double final_loss = NAN, final_val_loss = NAN, best_val_loss = NAN, initial_loss = NAN;
  bool diverged = false;  // the loss diverged (non-finite or exploding)
  int64_t diverged_step = -1;
  std::string diverged_reason;
  bool logit_unstable = false;  // layer-0 max attention logit passed monitor.diverge_attn_logit; not divergence
  int64_t logit_unstable_step = -1;
  bool output_unstable = false;  // the largest |output logit| passed monitor.diverge_output_logit
  int64_t output_unstable_step = -1;
  // Which failed first (attention_logits, output_logits, loss; "+" joins a
  // tie) and when; "" and -1 when none did.
  std::string first_failure;
  int64_t first_failure_step = -1;
  double spike_score_loss = NAN, spike_score_grad = NAN;
  int64_t loss_spikes = 0, grad_spikes = 0;
  double max_attn_logit_l0 = NAN, tokens_per_s = NAN, time_s = NAN;
  double final_mean_log_z = NAN, final_max_output_logit = NAN;  // output logits at the last monitor step
  std::map<std::string, TaskAccuracy> tasks;   // task name -> result at the last task evaluation
  std::map<std::string, double> set_losses;  // held-out set (eval.sets) -> loss at the last task evaluation
  bool finished() const {
    return status == "completed" || status == "diverged" || status == "nonfinite" || status == "logit_unstable";
  }
  // l0 = ln(vocab): the loss of the uniform prediction a freshly initialised
  // model makes, the same for every variant (the first logged loss is an
  // average over the first steps, and at a high LR it has already moved).
  // Only without a vocabulary size does the first logged loss stand in.
  double uniform_loss() const { return vocab_size > 1 ? std::log(static_cast<double>(vocab_size)) : initial_loss; }
  // The loss the LR sensitivity uses: final validation loss, else final training loss.
  double result_loss() const { return std::isfinite(final_val_loss) ? final_val_loss : final_loss; }
  // What the LR sensitivity counts as diverged: the loss diverged, or the
  // run ended without a finite loss below l0 (ln(vocab)).
  bool loss_diverged(double l0) const {
    return diverged || !std::isfinite(result_loss()) || (std::isfinite(l0) && result_loss() >= l0);
  }
};

struct VariantRow {
  std::string variant;
  std::string condition, size;        // as in PointRow
  int64_t non_embedding_parameters = 0;
  size_t points = 0, finished = 0;
  double init_loss = NAN;  // l0
  LrSensitivity lr;
  SensitivityIntervals ci{{NAN, NAN}, {NAN, NAN}, 0};  // bootstrap over seeds (several finished runs per LR)
  size_t seeds = 0;                                  // most finished runs at one LR
  int64_t d_model = 0, n_layers = 0;                 // of its points (one size each)
  std::vector<LrResult> results;                     // every finished run: (LR, loss, diverged)
};

std::vector<PointRow> collect_rows(const std::string& sweep_dir, const nlohmann::json& manifest);
// Status and results from RUN_DIR/summary.json ("not run" without one).
// Throws RunDirError naming the file and key when the file is damaged
// (read_summary_json in sweep_manifest.h).
void read_run_summary(const std::string& run_dir, PointRow& row);
// Takes row.tasks from `record`'s "tasks" object and row.set_losses from its
// "sets" object (a summary.json or a metrics.jsonl record), each replacing
// what the row had only when the record has it. Entries of another shape
// are skipped, never thrown on: the file may be one keel did not write intact.
void read_eval_results(const nlohmann::json& record, PointRow& row);

// The columns of the downstream results, shared by the compare table, the
// report's point table and summary.csv: one per task name and per held-out
// set that any row has, in name order; none at all when no row has any, so
// the tables of runs without eval.tasks and eval.sets are as they were.
class EvalColumns {
 public:
  explicit EvalColumns(const std::vector<PointRow>& rows);
  bool empty() const { return tasks_.empty() && sets_.empty(); }
  // Markdown: " builtin acc | web loss |" after a row's last "|", its rule
  // "---|---|", and a row's cells (" 0.528 ± 0.032 | 3.9012 |", "-" where missing).
  std::string md_header() const;
  std::string md_rule() const;
  std::string md_cells(const PointRow& row) const;
  // CSV: ",task_builtin_acc,task_builtin_acc_stderr,task_builtin_acc_norm,set_web_loss"
  // and a row's fields (empty where missing).
  std::string csv_header() const;
  std::string csv_fields(const PointRow& row) const;

 private:
  std::vector<std::string> tasks_, sets_;
};

// Bounds on the run logs `keel report` and `keel compare` read.
constexpr uint64_t kMaxRunLogBytes = uint64_t{1} << 30;
constexpr size_t kMaxRunLogLine = size_t{1} << 20;
// Checks RUN_DIR/metrics.jsonl and spikes.jsonl, which the plot scripts read
// too, before any Python sees them: each at most kMaxRunLogBytes, every line
// at most kMaxRunLogLine bytes and nested at most kMaxJsonDepth, every line
// that is JSON a record with a non-negative whole "step" (and "attn", where
// present, a list of objects). A line that is not JSON at all is let through:
// one torn by a crash, or the line a live run is writing; every reader skips
// it. Throws RunDirError naming file:line.
void check_run_logs(const std::string& run_dir);
// Calls `record` for every line of a run log (metrics.jsonl, spikes.jsonl)
// that is a JSON object with a whole "step", in file order; other lines (one
// torn by a crash, the one a live run is writing) are skipped. At most
// kMaxRunLogBytes are read (check_run_logs names a larger file); a missing
// file has no records.
void for_each_log_record(const std::string& path, const std::function<void(const nlohmann::json&)>& record);

// Groups finished rows by variant (in first-seen order) and computes each
// one's LR sensitivity. l0, the loss at initialization, is ln(vocab_size):
// the loss of a uniform prediction, which is what a freshly initialized model
// predicts (keel's std-0.02 init comes within 0.01 of it). The first logged
// training loss is no substitute: it averages the first log_every steps, in
// which a high LR already lowers the loss. Should a point's first logged
// loss be higher than ln(vocab_size) (an init with large logits), l0 is that.
std::vector<VariantRow> summarize_variants(const std::vector<PointRow>& rows);

std::string summary_csv(const std::vector<PointRow>& rows);
// A number for a markdown table cell: printf `format`, or "-" when not finite.
std::string md_cell(double v, const char* format = "%.4f");
// A CSV field: quoted (inner quotes doubled) when it holds a comma, quote or newline.
std::string csv_field(const std::string& s);
std::string variants_csv(const std::vector<VariantRow>& variants);

// Writes everything; returns 0, or 1 when the plots could not be drawn
// (the CSVs and report.md are written regardless).
int write_report(const std::string& sweep_dir, const ReportOptions& options);

// Runs `python script_name ARGS` (script found beside the binary's repository
// or the current directory; python: `asked_python`, else $KEEL_PYTHON, else
// .venv's) and lists in `drawn` which of OUT/plots/<name>.png exist after.
// Returns 0, or 1 with the reason in `note` (also printed).
int draw_plots(const std::string& script_name, const std::vector<std::string>& args, const std::string& out,
               const std::string& asked_python, const std::vector<std::string>& names, std::vector<std::string>* drawn,
               std::string* note);

}  // namespace keel
