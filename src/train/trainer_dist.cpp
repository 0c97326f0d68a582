// Trainer: data parallelism (docs/papers.md#libtorch-notes, "Data parallel"). Every rank
// builds the same model from the same seed, rank 0's parameters are broadcast
// and checked equal, each rank takes a disjoint share of every global batch
// (BatchLoader's rank/world split), and gradients are averaged by GradSync's
// bucketed all-reduces. Rank 0 alone writes; decisions that end or skip a
// step are agreed by all ranks (trainer.cpp's loop).
#include <cstring>

#include "config/config.h"
#include "optim/zero.h"
#include "train/run_dir.h"
#include "train/train_state.h"
#include "train/trainer_impl.h"
#include "util/error.h"
#include "util/hashing.h"
#include "util/text.h"

namespace keel {

// Runs one setup phase on every rank and agrees on its outcome: if any rank
// failed, every rank stops with that rank's message and exit code instead of
// waiting for it in the next collective.
void Trainer::collective_phase(const std::function<void()>& fn) {
  std::exception_ptr error;
  std::string message;
  int code = 1;
  try {
    fn();
  } catch (const std::exception& e) {
    error = std::current_exception(), message = e.what(), code = exit_code_of(e);
  }
  if (message.empty() && error) message = "unknown error";
  dist_->agree_on_setup(message, code);
  if (error) std::rethrow_exception(error);
}

// Ranks started with different configs would train different models and
// hang or silently average nonsense: the resolved configs are compared, and
// the keys that differ are named.
void Trainer::check_config_matches_rank0() {
  if (!dist_->distributed()) return;
  const auto all = dist_->exchange("config", config_to_yaml(cfg_));
  collective_phase([&] {
    // Rank 0 names every rank that differs from it; the others check themselves.
    std::vector<int> ranks;
    for (int r = 1; r < dist_->world(); ++r)
      if (rank0() || r == dist_->rank()) ranks.push_back(r);
    std::string problems;
    for (int r : ranks) {
      if (all[r] == all[0]) continue;
      ConfigDiff diff = diff_for_resume(config_from_yaml_text(all[0]), config_from_yaml_text(all[r]));
      std::string keys;
      for (const auto& d : diff.refused) keys += "\n  " + d;
      for (const auto& d : diff.allowed) keys += "\n  " + d;
      problems += "rank " + std::to_string(r) + "'s resolved config (hash " + hex64(fnv1a64(all[r])) +
                  ") differs from rank 0's (hash " + hex64(fnv1a64(all[0])) + "); rank 0 -> rank " +
                  std::to_string(r) + ":" + keys + "\n";
    }
    if (!problems.empty())
      throw DistError(problems + "every rank must run the same config (same file, same --set overrides)");
  });
}

void Trainer::setup_data_parallel() {
  if (!dist_->distributed()) return;
  std::vector<torch::Tensor> params;
  std::vector<int> owners;  // ZeRO-1: gradients are reduce-scattered to the rank that updates them
  const auto* sharded = dynamic_cast<const ShardedOptimizer*>(parts_.optimizer.get());
  for (size_t i = 0; i < parts_.optimizer->params().size(); ++i) {
    const auto& p = parts_.optimizer->params()[i];
    if (!p.param.requires_grad()) continue;
    params.push_back(p.param);
    if (sharded) owners.push_back(sharded->owners()[i]);
  }
  grad_sync_ = std::make_unique<GradSync>(params, *dist_, cfg_.dist.bucket_mb, cfg_.dist.overlap, std::move(owners));
  broadcast_parameters();
}

// Broadcast rank 0's weights, then prove every rank holds the same ones.
void Trainer::broadcast_parameters() {
  const bool equal_before = replicas_identical();
  std::vector<torch::Tensor> tensors;
  for (auto& p : parts_.model->parameters(true)) tensors.push_back(p);
  for (auto& b : parts_.model->buffers(true)) tensors.push_back(b);
  dist_->broadcast(tensors, 0, "the parameter broadcast");
  if (!replicas_identical())
    throw PeerFailure("parameters still differ between ranks after the broadcast from rank 0");
  run_->log->info(strf("data parallel: rank 0's parameters broadcast to %d ranks and checked equal%s", dist_->world(),
                       equal_before ? " (they already were)" : " (ranks had built different initial weights)"));
}

// A fingerprint of every parameter (fp64 sum and sum of squares), compared
// across ranks with a max and a min all-reduce: equal iff max == min.
bool Trainer::replicas_identical() {
  if (!dist_->distributed()) return true;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (auto& p : parts_.model->parameters(true)) {
    auto d = p.detach().to(torch::kFloat64);
    parts.push_back(d.sum());
    parts.push_back((d * d).sum());
  }
  auto hi = torch::stack(parts);
  auto lo = hi.clone();
  dist_->all_reduce_max(hi, "the replica check");
  dist_->all_reduce_min(lo, "the replica check");
  return torch::equal(hi.cpu(), lo.cpu());
}

// Each rank's loss is the mean over its equal share of the batch, so the
// mean over ranks is the global batch mean: logs, spike detection and the
// non-finite check see the same numbers as a single process would.
void Trainer::reduce_step_loss(torch::Tensor& loss, torch::Tensor& z) {
  auto both = torch::stack({loss.to(torch::kFloat32), z.to(torch::kFloat32)});
  dist_->all_reduce_sum(both, "the loss all-reduce");
  both.div_(static_cast<double>(dist_->world()));
  loss = both[0];
  z = both[1];
}

}  // namespace keel
