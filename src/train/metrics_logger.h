// The one logger of a training run: turns what a step reports into its
// metrics.jsonl record (and TensorBoard scalars) and its progress line, and
// keeps the running figures the summary needs. Owns the logging interval
// (its wall time, steps, loader and communication waits).
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>

#include "config/config.h"
#include "model/model_size.h"
#include "train/device.h"
#include "train/device_counters.h"
#include "train/run_dir.h"
#include "train/step_plan.h"
#include "train/training_setup.h"

namespace keel {

// What a step hands the logger besides the device counters.
struct StepReport {
  double lr = 0;
  nlohmann::json stats;              // monitor steps: collect_model_stats (attn, output)
  double param_norm = NAN;           // logged steps: |W| after the update
  double update_ratio = NAN;         // |dW| / |W|
  double update_norm = NAN;          // |dW|, the update as applied (after train.update_clip)
  double update_norm_preclip = NAN;  // train.update_clip: the optimizer's update before it was clipped
  nlohmann::json layer_grad_norms;   // monitor.layer_grad_norms on logged steps
  nlohmann::json param_stats;        // monitor steps: per-matrix optimizer statistics (monitor/param_stats.h)
};

class MetricsLogger {
 public:
  MetricsLogger(const Config& cfg, RunDir& run, const BatchGeometry& geometry, const ModelSize& size,
                const ComputeSetup& compute, int world);

  // The run's clock. Records a failed append left for the checkpoint
  // (RunDir::unwritten, restored by load_state) are written now.
  void start(int64_t start_step);
  // After a rewind to `step`: the ETA counts from there, the training time
  // goes on from `elapsed_s` (the abandoned steps took time too).
  void restart(int64_t step, double elapsed_s);
  // Every step: host time spent waiting for the batch and for the gradient all-reduces.
  void step_done(double loader_wait_ms, double comm_wait_ms);
  // Spike events of this interval, attached to the next record.
  void add_spikes(const nlohmann::json& events);
  // The logging interval ends: its wall time is taken now, before an
  // evaluation runs, and the next starts when log() returns, so tokens/s
  // measures training alone.
  struct Interval {
    int64_t steps = 0;  // since the previous record, earlier attempts included: the device counters' sums
    int64_t timed_steps = 0;  // those this process ran and timed: the throughput and the waits
    double seconds = 0, loader_wait_ms = 0, comm_wait_ms = 0;
  };
  Interval close_interval();
  // The record of step plan.step; `val_loss` and `spike_score` on eval steps;
  // `evals` ({"tasks": {name: metrics}, "sets": {name: {loss, ppl}}}) on task
  // and held-out-set evaluation steps, its keys added to the record.
  void log(const StepPlan& plan, const Interval& interval, const DeviceCounters::Values& counters,
           const StepReport& report, std::optional<double> val_loss, const nlohmann::json& spike_score,
           const nlohmann::json& evals = nlohmann::json());
  // A clean stop between records (`why`: "signal" | "stop_after_step"): a
  // record of its own, marked {"stop": why}, over the steps since the
  // previous record. It leaves the interval open (its sums, step count and
  // pending spikes), so the checkpoint saved next carries them and the next
  // regular record after a resume equals an uninterrupted run's.
  void log_stop(const StepPlan& plan, const DeviceCounters::Values& counters, const StepReport& report,
                const std::string& why);

  double last_loss() const { return last_loss_; }
  double initial_loss() const { return initial_loss_; }
  double mean_tokens_per_s() const { return tokens_per_s_n_ > 0 ? tokens_per_s_sum_ / tokens_per_s_n_ : 0.0; }
  double elapsed_s() const;  // the run's training time, earlier attempts included

  // What a resumed run needs to log and summarise as an uninterrupted one:
  // the open interval's step count and pending spike events, the losses and
  // tokens/s the summary reports, the time already spent, and the records a
  // failed append left unwritten (RunDir::unwritten). The device counters'
  // interval sums are the trainer's to save (DeviceCounters::snapshot).
  void save_state(nlohmann::json& extra) const;
  void load_state(const nlohmann::json& extra);

 private:
  using Clock = std::chrono::steady_clock;
  const Config& cfg_;
  RunDir& run_;
  BatchGeometry geometry_;
  ModelSize size_;
  ComputeSetup compute_;
  int world_;
  int64_t start_step_ = 0;
  double earlier_s_ = 0;  // elapsed_s() of the attempts before this one
  Clock::time_point run_start_, interval_start_;
  int64_t interval_steps_ = 0, timed_steps_ = 0;
  double loader_wait_ms_ = 0, comm_wait_ms_ = 0;
  nlohmann::json carried_ = nlohmann::json::array();  // unwritten records of the checkpoint resumed from
  nlohmann::json spikes_ = nlohmann::json::array();
  double last_loss_ = NAN, initial_loss_ = NAN;
  double tokens_per_s_sum_ = 0;
  int64_t tokens_per_s_n_ = 0;

  Interval open_interval() const;
  // The record and progress line of a regular record (why empty) or a stop record.
  void write(const StepPlan& plan, const Interval& interval, const DeviceCounters::Values& counters,
             const StepReport& report, std::optional<double> val_loss, const nlohmann::json& spike_score,
             const nlohmann::json& evals, const std::string& why);
};

}  // namespace keel
