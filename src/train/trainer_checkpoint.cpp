// Trainer: checkpoints and resume (REFERENCE.md §9).
#include <sstream>

#include "checkpoint/checkpoint_error.h"
#include "checkpoint/checkpoint_store.h"
#include "checkpoint/posix_io.h"
#include "train/train_state.h"
#include "train/trainer_impl.h"
#include "util/log.h"

namespace keel {
// --resume auto: the newest valid checkpoint (newer broken ones are reported
// and skipped), or a fresh start when there is none. --resume PATH: that one.
void Trainer::resume_from_checkpoint() {
  std::string dir;
  if (opts_.resume == "auto") {
    std::vector<std::string> rejected;
    auto latest = CheckpointStore(run_->path()).latest_valid(&rejected);
    for (const auto& why : rejected) run_->log->warn("skipping invalid checkpoint " + why);
    if (!latest) {
      run_->log->info("--resume auto: no valid checkpoint in " + run_->path() + "; starting fresh");
      return;
    }
    dir = *latest;
  } else {
    dir = opts_.resume;
  }
  CheckpointStore::verify(dir);  // a corrupted checkpoint is named before anything else
  Config saved = checkpoint_config(dir);
  ConfigDiff diff = diff_for_resume(saved, cfg_);
  if (!diff.refused.empty()) {
    std::string list;
    for (const auto& d : diff.refused) list += "\n  " + d;
    throw RunDirError("refusing to resume from " + dir + ": the config differs in keys that change the model, "
                      "data or optimisation (start a new run instead):" + list);
  }
  for (const auto& d : diff.allowed) run_->log->info("resume: config change allowed: " + d);
  TrainState state = load_training_checkpoint(dir, model_, optimizer_.get(), nullptr);
  start_step_ = state.step;
  last_saved_step_ = state.step;
  const auto& extra = state.extra;
  if (extra.contains("best_val_loss") && extra["best_val_loss"].is_number())
    best_val_loss_ = extra["best_val_loss"].get<double>();
  if (extra.contains("initial_loss") && extra["initial_loss"].is_number())
    initial_loss_ = extra["initial_loss"].get<double>();
  if (extra.contains("nonfinite_steps")) {
    nonfinite_seen_ = extra["nonfinite_steps"].get<int64_t>();
    nonfinite_count_.fill_(static_cast<double>(nonfinite_seen_));
  }
  if (extra.contains("stability")) stability_->load_state(extra["stability"]);
  if (extra.contains("max_attn_logit_per_layer"))
    max_attn_logit_ = extra["max_attn_logit_per_layer"].get<std::vector<double>>();
  if (extra.contains("spike_skips")) spike_skips_ = extra["spike_skips"].get<int64_t>();
  truncate_metrics_after(start_step_);
  run_->log->info(strf("resumed from %s at step %lld", dir.c_str(), static_cast<long long>(start_step_)));
}

// A run that crashed after its last checkpoint logged steps it will now
// redo; drop them so metrics.jsonl has each step once.
void Trainer::truncate_metrics_after(int64_t step) {
  const std::string path = run_->file("metrics.jsonl");
  if (!path_exists(path)) return;
  std::string kept, line;
  std::istringstream in(read_small_file(path, 1ull << 30));
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto rec = nlohmann::json::parse(line, nullptr, false);
    if (!rec.is_discarded() && rec.contains("step") && rec["step"].get<int64_t>() > step) continue;
    kept += line + "\n";
  }
  run_->reopen_metrics(kept);
  // spikes.jsonl likewise.
  const std::string spikes = run_->file("spikes.jsonl");
  if (!path_exists(spikes)) return;
  std::string kept_spikes;
  std::istringstream sin(read_small_file(spikes, 1ull << 30));
  while (std::getline(sin, line)) {
    auto rec = nlohmann::json::parse(line, nullptr, false);
    if (!rec.is_discarded() && rec.contains("step") && rec["step"].get<int64_t>() > step) continue;
    kept_spikes += line + "\n";
  }
  write_file_atomic(spikes, kept_spikes);
}

// Gradient L2 norm of each block ("blocks.N.*") and of everything else
// (embedding, final norm, head), before clipping.
void Trainer::save_checkpoint(int64_t steps_done) {
  if (steps_done == last_saved_step_) return;
  TrainState state;
  state.step = steps_done;
  state.tokens = steps_done * global_batch_ * seq_len_;
  state.extra = {{"best_val_loss", std::isfinite(best_val_loss_) ? nlohmann::json(best_val_loss_) : nlohmann::json()},
                 {"initial_loss", std::isnan(initial_loss_) ? nlohmann::json() : nlohmann::json(initial_loss_)},
                 {"nonfinite_steps", nonfinite_seen_},
                 {"stability", stability_->state()},
                 {"max_attn_logit_per_layer", max_attn_logit_},
                 {"spike_skips", spike_skips_}};
  auto t0 = Clock::now();
  std::string dir = save_training_checkpoint(run_->path(), cfg_, model_, optimizer_.get(), state, tokenizer_path_);
  last_saved_step_ = steps_done;
  auto removed = CheckpointStore(run_->path()).prune(cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_every);
  run_->log->info(strf("checkpoint %s (%.2f s)%s", dir.c_str(), seconds_since(t0),
                       removed.empty() ? "" : strf(", pruned %zu", removed.size()).c_str()));
}

}  // namespace keel
