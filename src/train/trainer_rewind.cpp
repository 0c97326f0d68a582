// Trainer: automatic spike recovery, monitor.on_spike: rewind (PaLM,
// docs/papers.md#spike-recovery). A flagged spike sends the run back to
// the newest checkpoint before it, and the batches from there on (through
// the spike's own, or monitor.rewind_skip_batches of them) are skipped: the
// data order stays a pure function of the step and the skip list
// (train/data_skips.h), which checkpoints carry, so a resume after a rewind
// is bit-exact and a run given the same list from the start
// (data.skip_batches) ends with the same weights.
#include <algorithm>
#include <cmath>
#include <limits>

#include "checkpoint/checkpoint_store.h"
#include "train/trainer_impl.h"
#include "util/error.h"
#include "util/log.h"
#include "util/text.h"

namespace keel {

std::optional<int64_t> Trainer::spike_to_rewind(const std::vector<SpikeEvent>& events) {
  if (cfg_.monitor.spike_action() != SpikeAction::rewind) return std::nullopt;
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const auto& e : events) first = std::min(first, e.step);
  if (dist_->distributed()) {
    // Every rank judges the same all-reduced loss and gradient norm, so they
    // agree already; the minimum over ranks makes it a collective decision
    // all the same (one small all-reduce, on steps that drain spikes anyway).
    const double mine = events.empty() ? std::numeric_limits<double>::infinity() : static_cast<double>(first);
    auto t = torch::tensor({mine}, torch::TensorOptions().dtype(torch::kFloat64)).to(compute_.device);
    dist_->all_reduce_min(t, "the rewind vote");
    const double agreed = t.cpu().item<double>();
    return std::isfinite(agreed) ? std::optional<int64_t>(static_cast<int64_t>(agreed)) : std::nullopt;
  }
  return events.empty() ? std::nullopt : std::optional<int64_t>(first);
}

int64_t Trainer::rewind(int64_t spike_step, const std::vector<SpikeEvent>& spikes) {
  // Spikes are judged before every checkpoint is saved (StepPlan), so every
  // checkpoint on disk precedes the spike; rank 0 picks the newest, every
  // rank loads it.
  int64_t to = -1;
  if (rank0())
    for (const auto& [step, dir] : CheckpointStore(run_->path()).list_valid(VerifyLevel::sizes))
      if (step < spike_step) to = std::max(to, step);
  if (dist_->distributed()) to = std::stoll(dist_->exchange("rewind_to", std::to_string(to))[0]);
  if (to < 0)
    throw CheckpointError(strf("monitor.on_spike: rewind found no checkpoint before the spike at step %lld in %s",
                               static_cast<long long>(spike_step), run_->path().c_str()));
  const int64_t batches = cfg_.monitor.rewind_skip_batches > 0 ? cfg_.monitor.rewind_skip_batches : spike_step - to;
  if (batches < spike_step - to)
    run_->log->warn(strf("monitor.rewind_skip_batches = %lld is shorter than the %lld steps from checkpoint %lld to "
                         "the spike: the spike's batch will be read again",
                         static_cast<long long>(batches), static_cast<long long>(spike_step - to),
                         static_cast<long long>(to)));
  // The run's own history outlives the checkpoint it goes back to: the skip
  // list (with this rewind) and the training time so far.
  DataSkips skips = data_skips_;
  skips.add({to, batches, spike_step});
  const double elapsed = metrics_->elapsed_s();
  const std::string dir = CheckpointStore(run_->path()).step_dir(to);
  restore_checkpoint(dir, /*branch=*/true, "rewind");
  data_skips_ = skips;
  metrics_->restart(to, elapsed);
  last_saved_step_ = to;
  // The record carries the step it went back to, so a later resume at or
  // after that step keeps it in spikes.jsonl.
  // The spikes' own records went to the branch with the abandoned steps; this one keeps them.
  nlohmann::json flagged = nlohmann::json::array();
  for (const auto& e : spikes) flagged.push_back(e.to_json());
  const nlohmann::json event = {{"event", "rewind"},          {"step", to},
                                {"spike_step", spike_step},   {"skipped_batches", batches},
                                {"rewinds", skips.rewinds()}, {"data_step_after", skips.data_step(to)},
                                {"spikes", flagged}};
  run_->append_event("spikes.jsonl", event);
  metrics_->add_spikes(nlohmann::json::array({event}));
  run_->log->warn(strf("rewind %lld: spike at step %lld, back to the checkpoint of step %lld; skipping %lld "
                       "batch(es), step %lld reads batch %lld",
                       static_cast<long long>(skips.rewinds()), static_cast<long long>(spike_step),
                       static_cast<long long>(to), static_cast<long long>(batches), static_cast<long long>(to + 1),
                       static_cast<long long>(skips.data_step(to) + 1)));
  return to;
}

}  // namespace keel
