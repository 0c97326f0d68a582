// The Trainer class, shared by trainer.cpp (setup, the step, the loop),
// trainer_checkpoint.cpp (save, resume) and trainer_dist.cpp (data
// parallelism). Private to src/train.
//
// The trainer holds the run's components; each owns its cadence-independent
// state and its part of a checkpoint: the Evaluator (validation loss, best so
// far), the StabilityMonitor (spikes, scores, divergence, attention maxima),
// the MetricsLogger (records, progress, throughput) and the DeviceCounters
// (what steps leave on the device). What happens at a step is decided once,
// by a StepPlan; what a step measures travels in a StepReport, not members.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "distributed/grad_sync.h"
#include "distributed/process_group.h"
#include "monitor/stability.h"
#include "train/device.h"
#include "train/data_skips.h"
#include "train/device_counters.h"
#include "train/evaluator.h"
#include "eval/task_evaluator.h"
#include "train/metrics_logger.h"
#include "train/run_dir.h"
#include "train/step_plan.h"
#include "train/trainer.h"
#include "train/training_setup.h"
#include "train/weight_ema.h"
#include "util/fault_inject.h"
#include "util/fs.h"

namespace keel {

class Trainer {
 public:
  Trainer(const Config& config, const TrainOptions& options) : cfg_(config), opts_(options) {}
  int run();

 private:
  // Why the loop ends after a step, agreed by every rank.
  struct StopVote {
    bool signal = false;        // SIGINT/SIGTERM here or on another rank
    bool stop_after = false;    // --stop-after-step
    const char* instability = nullptr;  // "diverged" | "logit_unstable": newly so, and the config stops on it
    bool stopping() const { return signal || stop_after; }
    const char* reason() const { return signal ? "signal" : "stop_after_step"; }  // stopped_by, the stop record's mark
  };

  void setup();
  void print_settings();
  StepReport train_step(const StepPlan& plan);
  bool halt_on_nonfinite(const StepPlan& plan);  // records new non-finite steps; true when train.nonfinite: halt
  StopVote vote_on_stopping(const StepPlan& plan);
  // why: "resume" (only when newer checkpoints exist) or "rewind" (always: the abandoned records).
  void branch_off(const std::string& resumed_dir, int64_t step, const std::string& why);
  void resume_from_checkpoint_unchecked(const std::string& dir);
  // The state of checkpoint `dir`; with `branch`, newer checkpoints and log
  // records move to branches/ (branch_off). Shared by resume and rewind.
  void restore_checkpoint(const std::string& dir, bool branch, const std::string& why);
  // train.cooldown_from: the trunk's checkpoint of step cooldown_at, as a
  // resume of it with the cooldown keys allowed to differ (trainer_checkpoint.cpp).
  void start_from_trunk();
  std::string parent_checkpoint_;  // the trunk checkpoint a cooldown branch started from
  void log_step(const StepPlan& plan, const StepReport& report);
  void setup_tasks(const DataManifest& data);
  nlohmann::json evaluate_tasks(const StepPlan& plan);
  // The weight EMA evaluated as the live weights were at this step: {"val_loss", "val_ppl", "tasks", "sets"}.
  nlohmann::json evaluate_ema(const StepPlan& plan);
  void write_summary(const std::string& stopped_by);  // throws write_failure() when a log lost a line
  [[noreturn]] void stop_on_write_failure(int64_t step);  // a full disk: checkpoint if it fits, summary, throw
  FileError write_failure() const;                      // RunDir::write_error() with its errno's exit code
  void record_spikes(const std::vector<SpikeEvent>& events);
  nlohmann::json per_layer_grad_norms();
  void measure_update(const std::vector<torch::Tensor>& before, StepReport& report);
  void apply_qk_clip();
  void inject_momentum_fault();
  void inject_loss_faults(int64_t step, LossParts& loss) const;
  // monitor.on_spike: rewind (trainer_rewind.cpp): the first spike of these
  // events every rank agrees to rewind for, or nullopt.
  std::optional<int64_t> spike_to_rewind(const std::vector<SpikeEvent>& events);
  // Back to the newest checkpoint before `spike_step`, skipping batches from
  // there; returns the checkpoint's step (the loop goes on after it).
  int64_t rewind(int64_t spike_step, const std::vector<SpikeEvent>& spikes);
  // Checkpoints (trainer_checkpoint.cpp).
  std::string choose_resume_dir();
  void resume_from_checkpoint(const std::string& dir);
  void save_checkpoint(int64_t steps_done);
  void truncate_logs_after(int64_t step);
  std::vector<std::pair<std::string, torch::Tensor>> gather_rng_states();
  // Data parallelism (src/distributed; trainer_dist.cpp).
  void setup_data_parallel();
  void collective_phase(const std::function<void()>& fn);
  void check_config_matches_rank0();
  void broadcast_parameters();
  bool replicas_identical();
  void reduce_step_loss(torch::Tensor& loss, torch::Tensor& z);
  bool rank0() const { return dist_->rank() == 0; }

  Config cfg_;
  TrainOptions opts_;
  VoteCadence vote_cadence_{cfg_.train.log_every};  // data parallel: when the stop vote runs (step_plan.h)
  std::chrono::steady_clock::time_point last_vote_time_ = std::chrono::steady_clock::now();
  int64_t last_vote_step_ = 0;
  ComputeSetup compute_;
  std::unique_ptr<Dist> dist_;           // a job of one unless RANK/WORLD_SIZE (or SLURM) say otherwise
  std::unique_ptr<GradSync> grad_sync_;  // only when distributed
  std::unique_ptr<RunDir> run_;
  BatchGeometry geometry_;
  TrainingParts parts_;                  // model, optimizer, step runner (shared with keel bench)
  std::unique_ptr<BatchLoader> train_data_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<TaskEvaluator> tasks_;  // eval.tasks; null without any
  std::unique_ptr<WeightEma> ema_;        // train.ema_decay; null without it
  std::unique_ptr<StabilityMonitor> stability_;
  std::unique_ptr<MetricsLogger> metrics_;
  std::unique_ptr<DeviceCounters> counters_;
  TrainFaults faults_;  // planted by tests through KEEL_FAULT_INJECT (util/fault_inject.h)
  std::string tokenizer_path_;

  int64_t start_step_ = 0, steps_done_ = 0, last_saved_step_ = -1;
  int64_t nonfinite_seen_ = 0;   // non-finite steps recorded in nonfinite.jsonl
  int64_t spike_skips_ = 0;      // updates skipped by monitor.on_spike: skip_step
  DataSkips data_skips_;         // batches skipped (data.skip_batches, rewinds): the data order's state
  bool divergence_reported_ = false, instability_reported_ = false;
};

}  // namespace keel
