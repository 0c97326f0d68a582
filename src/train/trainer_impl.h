// The Trainer class, shared by trainer.cpp (setup, the step, logging, the
// loop) and trainer_checkpoint.cpp (save, resume). Private to src/train.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "dist/grad_sync.h"
#include "dist/process_group.h"
#include "model/model_size.h"
#include "model/transformer.h"
#include "monitor/stability.h"
#include "train/device.h"
#include "train/optimizer.h"
#include "train/run_dir.h"
#include "train/step_runner.h"
#include "train/trainer.h"

namespace keel {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class Trainer {
 public:
  Trainer(const Config& config, const TrainOptions& options) : cfg_(config), opts_(options) {}
  int run();

 private:
  void setup();
  void print_settings();
  void train_step(int64_t step);
  double evaluate();
  void log_step(int64_t step, bool eval_now);
  void write_summary(const std::string& stopped_by);
  std::string choose_resume_dir();
  void resume_from_checkpoint(const std::string& dir);
  std::vector<std::pair<std::string, torch::Tensor>> gather_rng_states();
  void save_checkpoint(int64_t steps_done);
  void truncate_metrics_after(int64_t step);
  void record_spikes(const std::vector<SpikeEvent>& events);
  nlohmann::json per_layer_grad_norms();
  // Data parallelism (src/dist): see the comments in trainer_dist.cpp.
  void setup_data_parallel();
  void collective_phase(const std::function<void()>& fn);
  void check_config_matches_rank0();
  void broadcast_parameters();
  bool replicas_identical();
  void reduce_step_loss(torch::Tensor& loss, torch::Tensor& z);
  bool monitor_step(int64_t step) const { return cfg_.monitor.every > 0 && (step + 1) % cfg_.monitor.every == 0; }
  bool rank0() const { return dist_->rank() == 0; }

  Config cfg_;
  TrainOptions opts_;
  ComputeSetup compute_;
  std::unique_ptr<Dist> dist_;           // a job of one unless RANK/WORLD_SIZE (or SLURM) say otherwise
  std::unique_ptr<GradSync> grad_sync_;  // only when distributed
  double comm_wait_ms_ = 0;              // host time blocked on gradient all-reduces, this logging interval
  int64_t rows_ = 0;                     // this rank's rows of each global batch
  std::unique_ptr<RunDir> run_;
  Transformer model_{nullptr};
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<StepRunner> runner_;   // the step's device work (shared with keel bench)
  std::unique_ptr<BatchLoader> train_data_, val_data_;
  ModelSize size_;
  std::string tokenizer_path_;
  int64_t last_saved_step_ = -1;
  int64_t nan_at_step_ = 0;  // fault injection (tests): KEEL_FAULT_INJECT=nan_loss_at_step:N
  int64_t spike_at_step_ = 0;  // KEEL_FAULT_INJECT=loss_x10_at_step:N (a planted loss spike)
  int64_t kill_at_step_ = 0, hang_at_step_ = 0;  // kill_rank_at_step:R:N, hang_rank_at_step:R:N
  void read_fault_injection();
  void apply_qk_clip();
  void inject_loss_faults(int64_t step, LossParts& loss) const;
  torch::Tensor qk_clipped_heads_;  // QK-clip: heads rescaled since the last metrics record (device)
  bool has_val_ = false;
  int64_t val_rows_ = 0;  // sequences per validation batch (all ranks together)

  int64_t global_batch_ = 0, micro_batch_ = 0, n_micro_ = 0, seq_len_ = 0;
  int64_t start_step_ = 0, steps_done_ = 0;
  double lr_ = 0;
  // Device-side accumulators, read only on logging steps.
  torch::Tensor loss_sum_, z_sum_, grad_norm_, nonfinite_count_;
  int64_t loss_count_ = 0;
  int64_t nonfinite_seen_ = 0;
  // Progress bookkeeping.
  Clock::time_point run_start_, interval_start_;
  int64_t interval_steps_ = 0;
  double last_loss_ = NAN, last_val_loss_ = NAN, best_val_loss_ = INFINITY, initial_loss_ = NAN;
  double loader_wait_ms_ = 0;
  // Monitoring (monitor.every): statistics of the current step, merged into
  // its metrics record; the per-layer maximum attention logit over the run.
  nlohmann::json pending_monitor_;
  std::unique_ptr<StabilityMonitor> stability_;
  nlohmann::json pending_spikes_ = nlohmann::json::array();
  int64_t spike_skips_ = 0;
  bool divergence_reported_ = false;
  double final_z_ = NAN;
  std::vector<double> max_attn_logit_;
  double param_norm_ = NAN, update_ratio_ = NAN;
  nlohmann::json layer_grad_norms_;  // monitor.layer_grad_norms, on logging steps
  double tokens_per_s_sum_ = 0;
  int64_t tokens_per_s_n_ = 0;
};

}  // namespace keel
