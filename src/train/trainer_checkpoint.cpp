// Trainer: checkpoints and resume (docs/papers.md#checkpoint-and-resume).
#include <chrono>
#include <cstring>
#include <sstream>

#include "checkpoint/checkpoint_store.h"
#include "train/train_state.h"
#include "optim/zero.h"
#include "train/trainer_impl.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/text.h"
#include "util/json.h"

namespace keel {
// --resume auto: the newest valid checkpoint (newer broken ones are reported
// and skipped), or "" for a fresh start when there is none. --resume PATH:
// that one. Rank 0 decides; setup() hands its choice to every rank.
std::string Trainer::choose_resume_dir() {
  if (opts_.resume != "auto") return opts_.resume;
  std::vector<std::string> rejected;
  auto latest = CheckpointStore(run_->path()).latest_valid(&rejected);
  for (const auto& why : rejected) run_->log->warn("skipping invalid checkpoint " + why);
  if (!latest) {
    run_->log->info("--resume auto: no valid checkpoint in " + run_->path() + "; starting fresh");
    return "";
  }
  return *latest;
}

void Trainer::resume_from_checkpoint(const std::string& dir) {
  try {
    resume_from_checkpoint_unchecked(dir);
  } catch (const nlohmann::json::exception& e) {  // state.json's "extra" as the components read it
    throw CheckpointError(dir + "/state.json: a field is missing or of the wrong type: " +
                          std::string(e.what()).substr(0, 300));
  }
}

void Trainer::start_from_trunk() {
  const auto& t = cfg_.train;
  if (!path_exists(t.cooldown_from + "/checkpoints"))
    throw ConfigError([&] {
      ConfigErrors e;
      e.add("train.cooldown_from", t.cooldown_from + " is not a keel run directory with checkpoints");
      return e;
    }());
  std::vector<std::string> rejected;
  std::string dir, steps;
  for (const auto& [step, d] : CheckpointStore(t.cooldown_from).list_valid(VerifyLevel::checksums, &rejected)) {
    steps += (steps.empty() ? "" : ", ") + std::to_string(step);
    if (step == t.cooldown_at) dir = d;
  }
  if (dir.empty())
    throw ConfigError([&] {
      ConfigErrors e;
      e.add("train.cooldown_at", std::to_string(t.cooldown_at) + ": " + t.cooldown_from +
                                     " has no valid checkpoint of that step (checkpoints at: " +
                                     (steps.empty() ? "none" : steps) + ")");
      return e;
    }());
  restore_checkpoint(dir, /*branch=*/false, "cooldown");
  parent_checkpoint_ = dir;
  run_->log->info(strf("cooldown branch of %s from step %lld: the LR decays to 0 over %lld steps (%s)", dir.c_str(),
                       static_cast<long long>(start_step_), static_cast<long long>(t.cooldown_steps),
                       name_of(t.cooldown_shape).c_str()));
}

void Trainer::resume_from_checkpoint_unchecked(const std::string& dir) {
  restore_checkpoint(dir, /*branch=*/opts_.resume != "auto", "resume");
  run_->log->info(strf("resumed from %s at step %lld", dir.c_str(), static_cast<long long>(start_step_)));
}

void Trainer::restore_checkpoint(const std::string& dir, bool branch, const std::string& why) {
  CheckpointStore::verify(dir);  // a corrupted checkpoint is named before anything else
  Config saved = checkpoint_config(dir);
  std::vector<std::string> changes = opts_.fork_changes;
  if (why == "cooldown")  // a branch differs from its trunk in these, and its name and place
    changes.insert(changes.end(), {"train.cooldown_steps", "train.cooldown_at", "train.cooldown_shape",
                                   "train.cooldown_from"});
  ConfigDiff diff = diff_for_resume(saved, cfg_, changes);
  if (!diff.refused.empty()) {
    std::string list;
    for (const auto& d : diff.refused) list += "\n  " + d;
    throw RunDirError("refusing to resume from " + dir + ": the config differs in keys that change the model, "
                      "data or optimisation (start a new run instead):" + list);
  }
  for (const auto& d : diff.allowed) run_->log->info("resume: config change allowed: " + d);
  TrainState state = load_training_checkpoint(dir, parts_.model, parts_.optimizer.get(), nullptr, dist_->rank());
  start_step_ = state.step;
  // The global batch and the data order depend on the step alone, and model
  // and optimizer state are the same on every rank, so a different world size
  // resumes the same run; only ranks the checkpoint has no generator state
  // for start from seeded generators (keel's training step draws no random
  // numbers, so nothing it computes changes).
  const int saved_world = json_int_or<int>(state.extra, "world_size", 1);
  if (saved_world != dist_->world())
    run_->log->warn(strf("resuming a run saved by %d rank(s) on %d: same global batch and data order%s", saved_world,
                         dist_->world(), dist_->world() > saved_world ? "; new ranks get seeded generators" : ""));
  last_saved_step_ = state.step;
  // Each component restores its own part.
  const auto& extra = state.extra;
  evaluator_->load_state(extra);
  if (tasks_) tasks_->load_state(extra);
  if (why != "cooldown" && extra.contains("cooldown_parent") && extra["cooldown_parent"].is_string())
    parent_checkpoint_ = extra["cooldown_parent"].get<std::string>();
  if (ema_) {  // the average continues exactly; a checkpoint without one starts it at the next step
    const auto saved = load_checkpoint_ema(dir);
    if (!saved.empty()) ema_->load_state(saved, dir + "/ema.safetensors");
    else run_->log->warn(dir + " has no ema.safetensors (saved without train.ema_decay): the weight average starts "
                               "from the weights of the next step");
    ema_->load_eval_state(extra);
  }
  metrics_->load_state(extra);
  if (extra.contains("device_counters")) {  // absent in checkpoints of an older keel
    const auto& saved_counters = extra["device_counters"];
    std::vector<double> values;
    if (saved_counters.is_array())
      for (const auto& v : saved_counters)
        if (v.is_number()) values.push_back(v.get<double>());
    if (!saved_counters.is_array() || values.size() != saved_counters.size() || !counters_->restore(values))
      throw CheckpointError(dir + "/state.json: device_counters is not the list of numbers this keel saves");
  }
  if (extra.contains("nonfinite_steps")) {
    nonfinite_seen_ = json_int<int64_t>(extra["nonfinite_steps"]);
    counters_->set_nonfinite_steps(nonfinite_seen_);
  }
  if (extra.contains("stability")) {
    nlohmann::json stability = extra["stability"];
    // Checkpoints of older keel kept the attention maxima beside the monitor's state.
    if (!stability.contains("max_attn_logit_per_layer") && extra.contains("max_attn_logit_per_layer"))
      stability["max_attn_logit_per_layer"] = extra["max_attn_logit_per_layer"];
    stability_->load_state(stability);
  }
  if (extra.contains("spike_skips")) spike_skips_ = json_int<int64_t>(extra["spike_skips"]);
  data_skips_.load_state(extra, dir + "/state.json");
  for (const auto& range : parse_skip_batches(opts_.fork_skips, nullptr)) {  // checked by keel train's options
    data_skips_.add(range);
    run_->log->info(strf("fork: %lld batch(es) skipped after step %lld", static_cast<long long>(range.batches),
                         static_cast<long long>(range.after_step)));
  }
  if (branch) branch_off(dir, start_step_, why);
  truncate_logs_after(start_step_);
}

namespace {
// The lines of a JSON-lines log whose "step" is at most `step` (records
// without a readable step are kept), or with `after` the others. A line that
// is not JSON is a record cut short by a kill during its append (a write
// that crosses a page boundary can stop part-way under SIGKILL): it belongs
// to neither side and is dropped, and *torn counts it, so the resumed run
// appends after whole lines only.
std::string lines_up_to_step(const std::string& path, int64_t step, bool after = false, int64_t* torn = nullptr) {
  std::string kept, line;
  std::istringstream in(read_small_file(path, 1ull << 30));
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_discarded()) {
      if (torn) ++*torn;
      continue;
    }
    const bool later = rec.is_object() && rec.contains("step") && rec["step"].is_number_integer() &&
                       json_int<int64_t>(rec["step"]) > step;
    if (later == after) kept += line + "\n";
  }
  return kept;
}
}  // namespace

// --resume PATH to a checkpoint older than this run's newest starts a new
// branch of the run: the newer checkpoints and the log records after `step`
// move to branches/<name>/ (kept whole, listed in branches.jsonl), so
// --resume auto follows the current branch and pruning never sees the old one.
void Trainer::branch_off(const std::string& resumed_dir, int64_t step, const std::string& why) {
  if (!run_->writer()) return;
  CheckpointStore store(run_->path());
  if (real_path(dir_name(resumed_dir)) != real_path(store.checkpoints_dir())) return;  // another run's checkpoint
  std::string name = "from_step_" + std::to_string(step) + "_at_" + utc_now("%Y%m%dT%H%M%SZ");
  // Two rewinds to one step within a second: a name of their own each.
  for (int n = 2; path_exists(run_->path() + "/branches/" + name); ++n)
    name = "from_step_" + std::to_string(step) + "_at_" + utc_now("%Y%m%dT%H%M%SZ") + "_" + std::to_string(n);
  const std::string branch = run_->path() + "/branches/" + name;
  const std::vector<int64_t> moved = store.move_steps_after(step, branch + "/checkpoints");
  if (moved.empty() && why == "resume") return;  // nothing newer: an ordinary resume (a rewind keeps its logs)
  ensure_directory(branch);
  for (const char* log_name : {"metrics.jsonl", "spikes.jsonl", "nonfinite.jsonl"})
    if (path_exists(run_->file(log_name)))
      write_file_durably(branch + "/" + log_name, lines_up_to_step(run_->file(log_name), step, /*after=*/true));
  for (const char* kept : {"summary.json", "config.yaml"})
    if (path_exists(run_->file(kept))) write_file_durably(branch + "/" + kept, read_small_file(run_->file(kept)));
  const nlohmann::json record = {{"branch", "branches/" + name}, {"resumed_from_step", step}, {"why", why},
                                 {"abandoned_checkpoints", moved}, {"at", utc_now()}};
  std::string listing = path_exists(run_->file("branches.jsonl")) ? read_small_file(run_->file("branches.jsonl")) : "";
  write_file_atomic(run_->file("branches.jsonl"), listing + record.dump() + "\n");
  std::string steps;
  for (int64_t s : moved) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
  run_->log->warn(strf("%s to step %lld starts a new branch: checkpoints %s and the records after step "
                       "%lld moved to %s (listed in branches.jsonl)",
                       why == "resume" ? "resuming" : "rewinding", static_cast<long long>(step),
                       steps.empty() ? "(none)" : steps.c_str(), static_cast<long long>(step), branch.c_str()));
}

// A run that crashed after its last checkpoint logged steps it will now
// redo; drop them so every log has each step once.
void Trainer::truncate_logs_after(int64_t step) {
  if (!run_->writer()) return;
  for (const char* name : {"metrics.jsonl", "spikes.jsonl", "nonfinite.jsonl"}) {
    const std::string path = run_->file(name);
    if (!path_exists(path)) continue;
    int64_t torn = 0;
    const std::string kept = lines_up_to_step(path, step, /*after=*/false, &torn);
    if (torn > 0)
      run_->log->warn(strf("%s: dropped %lld line(s) that are not JSON, a record cut short when the run was "
                           "killed while appending it",
                           path.c_str(), static_cast<long long>(torn)));
    if (std::string(name) == "metrics.jsonl")
      run_->reopen_metrics(kept);  // TensorBoard files too
    else
      write_file_atomic(path, kept);
  }
}

void Trainer::save_checkpoint(int64_t steps_done) {
  if (steps_done == last_saved_step_) return;
  TrainState state;
  state.step = steps_done;
  state.tokens = steps_done * geometry_.tokens_per_step();
  state.extra = {{"nonfinite_steps", nonfinite_seen_},
                 {"stability", stability_->state()},
                 {"spike_skips", spike_skips_},
                 {"world_size", dist_->world()},
                 {"device_counters", counters_->snapshot()}};  // sync point; the open logging interval's sums
  evaluator_->save_state(state.extra);
  if (tasks_) tasks_->save_state(state.extra);
  if (!parent_checkpoint_.empty()) state.extra["cooldown_parent"] = parent_checkpoint_;
  if (ema_) {
    ema_->save_state(state.extra);
    state.ema = ema_->state();
  }
  metrics_->save_state(state.extra);
  data_skips_.save_state(state.extra);
  state.rng = gather_rng_states();
  const auto t0 = std::chrono::steady_clock::now();
  std::string dir;
  std::vector<std::string> removed;
  // ZeRO-1: every rank's optimizer state to rank 0 first (collective), so the checkpoint is one logical state.
  double gather_s = -1;
  if (auto* sharded = dynamic_cast<ShardedOptimizer*>(parts_.optimizer.get())) {
    sharded->gather_state();
    gather_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (rank0()) {  // rank 0 alone writes; the others wait at the barrier below
    dir = save_training_checkpoint(run_->path(), cfg_, parts_.model, parts_.optimizer.get(), state, tokenizer_path_);
    removed = CheckpointStore(run_->path()).prune(cfg_.checkpoint.keep_last, cfg_.checkpoint.keep_every);
  }
  if (dist_->distributed()) {
    if (!replicas_identical())
      throw PeerFailure(strf("at step %lld the ranks' parameters differ: the data-parallel replicas diverged",
                             static_cast<long long>(steps_done)));
    dist_->barrier("the checkpoint barrier");
  }
  last_saved_step_ = steps_done;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run_->log->info(strf("checkpoint %s (%.2f s%s)%s", dir.c_str(), seconds,
                       gather_s < 0 ? "" : strf(", %.2f s of it gathering the ZeRO-1 state", gather_s).c_str(),
                       removed.empty() ? "" : strf(", pruned %zu", removed.size()).c_str()));
}

// Every rank's generator states, collected on rank 0 through the rendezvous
// store (a few KiB): rank 0's under their plain names, rank r's as "rank<r>.*".
std::vector<std::pair<std::string, torch::Tensor>> Trainer::gather_rng_states() {
  auto local = local_rng_state();
  if (!dist_->distributed()) return local;
  std::string packed;
  for (auto& [name, t] : local) {
    auto bytes = t.contiguous().to(torch::kUInt8);
    packed += name + '\n' + std::to_string(bytes.numel()) + '\n';
    packed.append(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(bytes.numel()));
  }
  const auto all = dist_->exchange("rng", packed);
  if (!rank0()) return {};
  for (int r = 1; r < dist_->world(); ++r) {
    const std::string& p = all[r];
    size_t pos = 0;
    while (pos < p.size()) {
      const size_t nl1 = p.find('\n', pos), nl2 = p.find('\n', nl1 + 1);
      const std::string name = p.substr(pos, nl1 - pos);
      const int64_t n = std::stoll(p.substr(nl1 + 1, nl2 - nl1 - 1));
      auto t = torch::empty({n}, torch::kUInt8);
      std::memcpy(t.data_ptr<uint8_t>(), p.data() + nl2 + 1, static_cast<size_t>(n));
      local.emplace_back("rank" + std::to_string(r) + "." + name, t);
      pos = nl2 + 1 + static_cast<size_t>(n);
    }
  }
  return local;
}

}  // namespace keel
